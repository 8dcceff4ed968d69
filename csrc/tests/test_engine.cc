// The engine with process sets over the loopback transport: sets added by every rank get the
// same ids, collectives run in overlapping sets, a rank outside a set is refused with the set
// and its ranks named, removal fails what is pending, and shutdown ends every group.
#include <thread>

#include "engine/engine.h"
#include "harness.h"
#include "loopback.h"

namespace hvdlite {
namespace {

using testing::Fabric;
using testing::run_ranks;

// An all-reduce (Sum) of data in place.
int64_t allreduce(Engine& eng, int set, const std::string& name, std::vector<float>& data) {
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

int64_t broadcast(Engine& eng, int set, const std::string& name, std::vector<float>& data, int root) {
  auto e = std::make_unique<TensorEntry>();
  e->request.name = name;
  e->request.op = OpType::Broadcast;
  e->request.root = root;
  e->request.shape = {int64_t(data.size())};
  e->input = e->output = data.data();
  EntryList list;
  list.push_back(std::move(e));
  return eng.enqueue(set, std::move(list))[0];
}

void ok(Engine& eng, int64_t handle) {
  Outcome o = eng.wait(handle);
  if (o.status != Status::Success) throw testing::Failure("collective failed: " + o.error);
}

TEST(engine_runs_collectives_in_overlapping_process_sets) {
  Fabric fabric(3);
  run_ranks(3, [&](int r) {
    Config config;
    Engine eng(fabric.world(r), config);
    const int a = eng.add_process_set({0, 1});
    const int b = eng.add_process_set({2, 1});  // sorted by the engine: [1, 2]
    CHECK_EQ(a, 1);
    CHECK_EQ(b, 2);
    CHECK(eng.process_set(b).ranks == std::vector<int>({1, 2}));
    CHECK_EQ(eng.process_set(b).rank, r == 0 ? -1 : r - 1);
    CHECK_THROWS(eng.add_process_set({1, 0}), Status::InvalidArgument, "duplicate process set");
    CHECK_THROWS(eng.add_process_set({0, 0}), Status::InvalidArgument, "more than once");

    // Rank 1 is in both sets: its collective in `a` waits for rank 0, which submits only
    // after the one in `b` (with rank 2) has finished. Each set runs on its own.
    std::vector<float> x(5, float(r + 1)), y(5, float(r + 1)), z(1, 1.0f);
    if (r == 1) {
      int64_t in_a = allreduce(eng, a, "x", x);
      ok(eng, allreduce(eng, b, "x", y));  // the same name in another set
      ok(eng, allreduce(eng, 0, "after", z));
      ok(eng, in_a);
      CHECK(x[0] == 3.0f && y[0] == 5.0f);
    } else if (r == 2) {
      ok(eng, allreduce(eng, b, "x", y));
      ok(eng, allreduce(eng, 0, "after", z));
      CHECK(y[0] == 5.0f);
      CHECK_THROWS(allreduce(eng, a, "x", x), Status::InvalidArgument,
                   "rank 2 is not a member of process set 1 (ranks [0, 1])");
    } else {
      ok(eng, allreduce(eng, 0, "after", z));
      ok(eng, allreduce(eng, a, "x", x));
      CHECK(x[0] == 3.0f);
    }
    CHECK_EQ(z[0], 3.0f);
    if (r != 0) {
      std::vector<float> w(4, float(r));
      ok(eng, broadcast(eng, b, "w", w, 2));  // the root is a global rank
      CHECK_EQ(w[3], 2.0f);
    }

    // Removing a set fails what is still pending in it, on the rank that submitted it.
    std::vector<float> p(2, 1.0f);
    int64_t pending = r == 0 ? allreduce(eng, a, "never", p) : 0;
    CHECK(eng.remove_process_set(a));
    CHECK(!eng.remove_process_set(a));
    if (r == 0) {
      Outcome o = eng.wait(pending);
      CHECK(o.status == Status::ShutDown);
      // Named by this rank's removal, or by the round that told it the others removed it.
      CHECK(o.error.find("process set 1 (ranks 0, 1)") != std::string::npos);
      CHECK(o.error.find("removed") != std::string::npos);
    }
    CHECK_THROWS(allreduce(eng, a, "y", p), Status::InvalidArgument, "process set 1 does not exist");
    CHECK_EQ(eng.add_process_set({0, 2}), 1);  // the freed id comes back
    // The engine's destructor shuts every group down on every rank.
  });
}

TEST(engine_next_watched_returns_a_finished_request_while_an_older_one_waits_for_a_peer) {
  // Note [watched handles]: the watcher drives the oldest watched request's rounds, but comes
  // back as soon as any watched request finished.
  Fabric fabric(2);
  run_ranks(2, [&](int r) {
    Engine eng(fabric.world(r), Config{});
    std::vector<float> late(2, 1.0f), early(2, 1.0f);
    if (r == 0) {
      const int64_t l = allreduce(eng, 0, "late", late), e = allreduce(eng, 0, "early", early);
      eng.watch(l);
      eng.watch(e);
      const auto start = std::chrono::steady_clock::now();
      CHECK(eng.next_watched(start + std::chrono::seconds(10)) == e);
      CHECK(std::chrono::steady_clock::now() - start < std::chrono::milliseconds(1500));
      ok(eng, e);
      CHECK(eng.next_watched(std::chrono::steady_clock::now() + std::chrono::seconds(10)) == l);
      ok(eng, l);
    } else {
      ok(eng, allreduce(eng, 0, "early", early));
      std::this_thread::sleep_for(std::chrono::milliseconds(2000));
      ok(eng, allreduce(eng, 0, "late", late));
    }
    CHECK_EQ(late[0], 2.0f);
    CHECK_EQ(early[0], 2.0f);
  });
}

TEST(engine_shutdown_fails_requests_other_ranks_never_submit) {
  Fabric fabric(3);
  run_ranks(3, [&](int r) {
    Config config;
    Engine eng(fabric.world(r), config);
    const int s = eng.add_process_set({0, 1});
    std::vector<float> x(3, 1.0f);
    if (r == 0) {
      int64_t h = allreduce(eng, s, "lonely", x);
      int64_t g = allreduce(eng, 0, "lonely.global", x);
      eng.shutdown();
      CHECK(eng.wait(h).status == Status::ShutDown);
      CHECK(eng.wait(g).status == Status::ShutDown);
    } else if (r == 1) {
      // Blocked in the set while rank 0 shuts down: the set's own round must tell it, since
      // this rank's global set has nothing pending that could.
      Outcome o = eng.wait(allreduce(eng, s, "waits", x));
      CHECK(o.status == Status::ShutDown);
      CHECK(o.error.find("process set 1 (ranks 0, 1)") != std::string::npos);
      eng.shutdown();
    } else {
      eng.shutdown();
    }
    CHECK_THROWS(allreduce(eng, 0, "late", x), Status::ShutDown, "shut down");
  });
}

}  // namespace
}  // namespace hvdlite
