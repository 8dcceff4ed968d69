// The deadlock detector (engine/deadlock.h): the per-round decision as a pure function of the
// members' bits and the clock, the message, and the engine over the loopback transport (ranks
// as threads): ranks waiting on different names fail with Status::Deadlock on every rank and
// the next collective works; a rank that computes past the grace period trips nothing; a wait
// that gives up at its time limit leaves the request in flight; a process counts as computing
// from CPU time outside hvdlite's threads alone (Note [computing ranks]).
#include <atomic>
#include <map>
#include <thread>

#include "engine/cross_set_deadlock.h"
#include "engine/deadlock.h"
#include "engine/engine.h"
#include "engine/rank_computing.h"
#include "harness.h"
#include "loopback.h"

namespace hvdlite {
namespace {

using Clock = DeadlockDetector::Clock;
using testing::Fabric;
using testing::run_ranks;

// One round for every detector: each contributes its bits, all observe the AND.
std::vector<bool> round(std::vector<DeadlockDetector>& ranks, const std::vector<bool>& blocked,
                        bool ran, Clock::time_point now) {
  uint64_t word = ~uint64_t(0);
  for (size_t r = 0; r < ranks.size(); ++r) word &= ranks[r].flags(blocked[r], now) | ~DeadlockDetector::kBits;
  std::vector<bool> out;
  for (auto& d : ranks) out.push_back(d.observe(word, ran, now));
  return out;
}

TEST(deadlock_is_declared_by_every_rank_in_the_same_round_after_the_grace_period) {
  std::vector<DeadlockDetector> ranks(3, DeadlockDetector(30));
  const Clock::time_point t0 = Clock::now();
  const std::vector<bool> all(3, true), none(3, false);
  auto at = [&](double s) { return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  CHECK(round(ranks, all, false, at(0)) == none);   // the streak begins
  CHECK(round(ranks, all, false, at(29.9)) == none);
  CHECK(round(ranks, all, false, at(30.1)) == all);   // every rank's bit says so
  CHECK(round(ranks, all, false, at(30.2)) == none);  // then a fresh streak
  CHECK(round(ranks, all, false, at(30.3)) == none);
}

TEST(deadlock_needs_every_rank_blocked_and_nothing_running) {
  const Clock::time_point t0 = Clock::now();
  const std::vector<bool> all(3, true), none(3, false);
  auto at = [&](double s) { return t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s)); };
  // Rank 1 computes (not blocked) for a long time: never.
  std::vector<DeadlockDetector> ranks(3, DeadlockDetector(1));
  for (int i = 0; i < 100; ++i) CHECK(round(ranks, {true, false, true}, false, at(i)) == none);
  // Rounds that ran something restart the streak.
  for (int i = 0; i < 100; ++i) CHECK(round(ranks, all, true, at(100 + i)) == none);
  // A computing rank in between restarts it too.
  CHECK(round(ranks, all, false, at(300)) == none);
  CHECK(round(ranks, {true, true, false}, false, at(300.9)) == none);
  CHECK(round(ranks, all, false, at(301.5)) == none);
  CHECK(round(ranks, all, false, at(302.0)) == none);
  CHECK(round(ranks, all, false, at(302.6)) == all);  // 1.1 s into the new streak
  // Off: never.
  std::vector<DeadlockDetector> off(2, DeadlockDetector(0));
  for (int i = 0; i < 10; ++i) CHECK(round(off, {true, true}, false, at(i * 1000)) == std::vector<bool>(2, false));
}

TEST(deadlock_message_says_per_rank_what_it_waits_for_and_who_submitted_it) {
  std::vector<RankWaits> by_member(3);
  by_member[0] = {{"y"}, {"y"}};
  by_member[1] = {{"x"}, {"x", "z"}};
  by_member[2] = {{"y"}, {"y", "z"}};
  const std::string msg = describe_deadlock(by_member, Membership{}, 30, {});
  CHECK(msg.find("ranks 0 and 2 wait for 'y' (submitted by ranks 0, 2), rank 1 waits for 'x' "
                 "(submitted by rank 1)") != std::string::npos);
  CHECK(msg.find("30 s (HVDLITE_DEADLOCK_TIME_SECONDS)") != std::string::npos);
  // Inside a process set: global ranks and the set's name.
  const std::string in_set = describe_deadlock({{{"a", "b"}, {"a", "b"}}, {{"b"}, {"b"}}},
                                               Membership{2, {1, 3}}, 5, {});
  CHECK(in_set.find("deadlock in process set 2 (ranks 1, 3)") != std::string::npos);
  CHECK(in_set.find("rank 1 waits for 'a' (submitted by rank 1) and 'b' (submitted by ranks 1, 3), "
                    "rank 3 waits for 'b' (submitted by ranks 1, 3)") != std::string::npos);
  const RankWaits back = decode_waits(encode_waits(by_member[2]));
  CHECK(back.waits == by_member[2].waits && back.pending == by_member[2].pending);
}

TEST(ranks_that_waited_longest_fell_behind) {
  // Note [the ranks that fell behind]: more than kBehindMargin longer than the last to block.
  std::vector<RankWaits> by_member(3);
  by_member[0] = {{"y"}, {"y"}, 0.5};
  by_member[1] = {{"x"}, {"x"}, 0.5 + kBehindMargin + 0.3};
  by_member[2] = {{"y"}, {"y"}, 0.5 + kBehindMargin / 2};
  CHECK((fell_behind(by_member) == std::vector<bool>{false, true, false}));
  const std::string msg = describe_deadlock(by_member, Membership{}, 30, fell_behind(by_member));
  CHECK(msg.find("rank 1 has waited longest") != std::string::npos);
  CHECK(msg.find("only its requests fail") != std::string::npos);
  CHECK(decode_waits(encode_waits(by_member[1])).waited_s == by_member[1].waited_s);
  // Ranks that blocked together: nobody fell behind, everybody's requests fail.
  by_member[1].waited_s = 0.5 + kBehindMargin / 2;
  CHECK((fell_behind(by_member) == std::vector<bool>(3, false)));
  CHECK(describe_deadlock(by_member, Membership{}, 30, fell_behind(by_member))
            .find("each of these requests fails on every rank") != std::string::npos);
}

int64_t allreduce(Engine& eng, const std::string& name, std::vector<float>& data, int set = 0) {
  auto e = std::make_unique<TensorEntry>();
  e->request.name = name;
  e->request.op = OpType::Allreduce;
  e->request.reduce_op = ReduceOp::Sum;
  e->request.shape = {int64_t(data.size())};
  e->input = e->output = data.data();
  EntryList list;
  list.push_back(std::move(e));
  return eng.enqueue(set, std::move(list))[0];
}

TEST(engine_fails_divergent_waits_with_deadlock_on_every_rank_and_goes_on) {
  Fabric fabric(3);
  run_ranks(3, [&](int r) {
    Config config;
    config.deadlock_s = 0.3;
    Engine eng(fabric.world(r), config);
    std::vector<float> x(4, 1.0f);
    const auto start = Clock::now();
    Outcome o = eng.wait(allreduce(eng, r == 1 ? "x" : "y", x));
    CHECK(o.status == Status::Deadlock);
    CHECK(o.error.find("ranks 0 and 2 wait for 'y' (submitted by ranks 0, 2), rank 1 waits for "
                       "'x' (submitted by rank 1)") != std::string::npos);
    CHECK(Clock::now() - start < std::chrono::seconds(5));
    std::vector<float> z(2, float(r));
    CHECK(eng.wait(allreduce(eng, "after", z)).status == Status::Success);
    CHECK_EQ(z[1], 3.0f);
  });
}

TEST(engine_fails_only_the_rank_that_fell_behind_and_the_others_go_on_with_it) {
  // Note [the ranks that fell behind]: rank 1 waits in 'x'; ranks 0 and 2 skipped it and come
  // to 'y' later. Only rank 1 gets the error; their 'y' stays pending and completes once rank 1
  // submits it too. The set's names start over at that round, on every rank alike.
  Fabric fabric(3);
  run_ranks(3, [&](int r) {
    Config config;
    config.deadlock_s = 0.3;
    Engine eng(fabric.world(r), config);
    std::vector<float> x(4, 1.0f), y(3, float(r));
    if (r == 1) {
      Outcome o = eng.wait(allreduce(eng, "x", x));
      CHECK(o.status == Status::Deadlock);
      CHECK(o.error.find("rank 1 has waited longest") != std::string::npos);
      CHECK(o.agreed_round < 0);  // the numbering does not start over before 'y' ran
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(kBehindMargin * 1000) + 400));
    }
    Outcome o = eng.wait(allreduce(eng, "y", y));
    CHECK(o.status == Status::Success);
    CHECK_EQ(y[0], 3.0f);
    CHECK(o.agreed_round >= 0);
    std::vector<float> z(2, float(r));
    CHECK(eng.wait(allreduce(eng, "after", z)).status == Status::Success);
    CHECK_EQ(z[1], 3.0f);
  });
}

TEST(engine_counts_watched_handles_as_blocked) {
  // A future completer watches rather than waits (Note [watched handles]): a deadlock between
  // the requests behind futures is still found, and the watched handles come back failed.
  Fabric fabric(2);
  run_ranks(2, [&](int r) {
    Config config;
    config.deadlock_s = 0.3;
    Engine eng(fabric.world(r), config);
    std::vector<float> x(4, 1.0f);
    const int64_t h = allreduce(eng, r == 0 ? "bucket.0" : "bucket.1", x);
    eng.watch(h);
    CHECK(eng.next_watched(Clock::now() + std::chrono::seconds(10)) == h);
    Outcome o = eng.wait(h);
    CHECK(o.status == Status::Deadlock);
    CHECK(o.error.find("rank 0 waits for 'bucket.0'") != std::string::npos);
    std::vector<float> z(2, float(r));
    const int64_t after = allreduce(eng, "after", z);
    eng.watch(after);
    CHECK(eng.next_watched(Clock::now() + std::chrono::seconds(10)) == after);
    CHECK(eng.wait(after).status == Status::Success);
    CHECK_EQ(z[1], 1.0f);
  });
}

TEST(cross_set_deadlock_message_names_what_each_rank_waits_for_and_who_has_not_submitted_it) {
  std::map<int, std::vector<SetWaits>> by_rank;
  by_rank[0] = {SetWaits{1, {0, 1}, {"x"}, {"x"}}};
  by_rank[1] = {SetWaits{0, {0, 1, 2}, {"y"}, {"y"}}};
  by_rank[2] = {SetWaits{0, {0, 1, 2}, {"y"}, {"y"}}, SetWaits{2, {1, 2}, {}, {"z"}}};
  const std::string msg = describe_cross_set_deadlock(by_rank, 60);
  CHECK(msg.find("deadlock across process sets: every rank has been blocked waiting for 60 s "
                 "(twice HVDLITE_DEADLOCK_TIME_SECONDS)") == 0);
  CHECK(msg.find("rank 0 waits for 'x' in process set 1 (ranks 0, 1), not submitted by rank 1; "
                 "ranks 1 and 2 wait for 'y' in the global process set, not submitted by rank 0.") !=
        std::string::npos);
  const std::vector<SetWaits> back = decode_set_waits(encode_set_waits(by_rank[2]), 0);
  CHECK_EQ(back.size(), size_t(2));
  CHECK(back[1].set_id == 2 && back[1].ranks == std::vector<int>({1, 2}) && back[1].waits.empty() &&
        back[1].pending == std::vector<std::string>({"z"}));
}

TEST(engine_stops_with_deadlock_on_every_rank_when_ranks_wait_across_process_sets) {
  // Rank 0 waits in set [0, 1] for 'x', which rank 1 would submit only after 'y' in the global
  // set, which rank 0 would submit only after 'x': no group sees all its members blocked on
  // its own requests; the watch sees every rank stuck (Note [deadlock across process sets]).
  Fabric fabric(3);
  run_ranks(3, [&](int r) {
    Config config;
    config.deadlock_s = 0.2;
    Engine eng(fabric.world(r), config);
    const int set = eng.add_process_set({0, 1});
    std::vector<float> x(4, 1.0f);
    const auto start = Clock::now();
    Outcome o = eng.wait(r == 0 ? allreduce(eng, "x", x, set) : allreduce(eng, "y", x));
    CHECK(o.status == Status::Deadlock);
    CHECK(o.error.find("rank 0 waits for 'x' in process set 1 (ranks 0, 1), not submitted by rank 1; "
                       "ranks 1 and 2 wait for 'y' in the global process set, not submitted by "
                       "rank 0") != std::string::npos);
    CHECK(Clock::now() - start >= std::chrono::milliseconds(400));
    CHECK(Clock::now() - start < std::chrono::seconds(10));
    // hvdlite has stopped: a later collective fails at once with the same error.
    std::vector<float> z(2, 1.0f);
    bool refused = false;
    try {
      allreduce(eng, "after", z);
    } catch (const Error& e) {
      refused = e.status() == Status::Deadlock &&
                std::string(e.what()).find("deadlock across process sets") != std::string::npos;
    }
    CHECK(refused);
  });
}

TEST(engine_rank_computing_while_others_wait_across_sets_trips_nothing) {
  // Rank 1 submits in the set's order ('x', then 'y'), but computes past twice the grace
  // period first: every rank but one is stuck all along, and nothing is declared.
  Fabric fabric(3);
  run_ranks(3, [&](int r) {
    Config config;
    config.deadlock_s = 0.1;
    Engine eng(fabric.world(r), config);
    const int set = eng.add_process_set({0, 1});
    std::vector<float> x(4, 1.0f), y(4, 1.0f);
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(800));
    if (r != 2) CHECK(eng.wait(allreduce(eng, "x", x, set)).status == Status::Success);
    CHECK(eng.wait(allreduce(eng, "y", y)).status == Status::Success);
    CHECK_EQ(y[0], 3.0f);
  });
}

TEST(engine_rank_computing_past_the_grace_period_trips_nothing) {
  Fabric fabric(2);
  run_ranks(2, [&](int r) {
    Config config;
    config.deadlock_s = 0.2;
    Engine eng(fabric.world(r), config);
    std::vector<float> x(4, 1.0f);
    // Rank 1 also has a request pending meanwhile that nobody waits on.
    int64_t early = r == 1 ? allreduce(eng, "early", x) : 0;
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(800));
    std::vector<float> y(4, 1.0f);
    Outcome o = eng.wait(allreduce(eng, "slow", y));
    CHECK(o.status == Status::Success);
    CHECK_EQ(y[0], 2.0f);
    if (r == 0) {
      // A wait with a time limit gives up, the request still in flight, then completes.
      std::vector<float> e(4, 1.0f);
      const int64_t h = allreduce(eng, "early", e);
      CHECK(eng.wait(h).status == Status::Success);
    } else {
      CHECK(eng.wait(early).status == Status::Success);
    }
  });
}

// rank_computing()'s answers, one per window (grace 1 s: 250 ms windows), while a second
// thread spins outside hvdlite, spins inside a Scope (as a wait's polling does), or sleeps.
enum class Second { Spins, SpinsInHvdlite, Sleeps };
std::vector<bool> computing_while(Second what) {
  constexpr double kGrace = 1.0;
  std::atomic<bool> stop{false};
  std::thread t([&] {
    if (what == Second::SpinsInHvdlite) {
      HvdliteThread::Scope waiting;
      while (!stop.load()) {
      }
    } else if (what == Second::Spins) {
      while (!stop.load()) {
      }
    } else {
      while (!stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the thread has started
  rank_computing(kGrace);  // the window starts here
  std::vector<bool> out;
  for (int i = 0; i < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(260));
    out.push_back(rank_computing(kGrace));
  }
  stop = true;
  t.join();
  return out;
}

TEST(rank_computing_counts_cpu_time_outside_hvdlite_threads_only) {
  const std::vector<bool> all(4, true), none(4, false);
  CHECK(computing_while(Second::Spins) == all);
  CHECK(computing_while(Second::SpinsInHvdlite) == none);
  CHECK(computing_while(Second::Sleeps) == none);
  CHECK(computing_while(Second::Spins) == all);  // the Scope's thread left no trace
}

TEST(engine_wait_until_leaves_the_request_in_flight) {
  Fabric fabric(2);
  run_ranks(2, [&](int r) {
    Config config;
    Engine eng(fabric.world(r), config);
    std::vector<float> x(4, 1.0f);
    if (r == 0) {
      const int64_t h = allreduce(eng, "late", x);
      CHECK(!eng.wait_until(h, Clock::now() + std::chrono::milliseconds(200)));
      CHECK(!eng.poll(h));
      std::optional<Outcome> o;
      while (!(o = eng.wait_until(h, Clock::now() + std::chrono::milliseconds(100)))) {}
      CHECK(o->status == Status::Success);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      CHECK(eng.wait(allreduce(eng, "late", x)).status == Status::Success);
    }
    CHECK_EQ(x[0], 2.0f);
  });
}

}  // namespace
}  // namespace hvdlite
