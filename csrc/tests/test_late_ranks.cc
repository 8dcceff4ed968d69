// Late ranks on the cached path (late_ranks.h), at 3 ranks: the rounds' bitwise AND is done
// here by hand over every rank's words, so each round sees exactly what the transport would
// give every rank.
#include <map>
#include <set>

#include "engine/late_ranks.h"
#include "harness.h"

namespace hvdlite {
namespace {

constexpr int kRanks = 3;

// Every rank's LateRanks and the rounds between them. Slot s of the cache is tensor "t<s>".
struct Job {
  ResponseCache cache{16};
  LateRanks late[kRanks];
  Membership members;

  explicit Job(size_t tensors, std::vector<int> global = {}) {
    members.global_ranks = std::move(global);
    for (size_t s = 0; s < tensors; ++s) {
      Response r;
      r.name = "t" + std::to_string(s);
      cache.insert(r);
    }
  }

  // One round: has[r] = the slots rank r has pending; evicted = slots some rank invalidates;
  // tracing = some rank's timeline is on. Returns each rank's late ranks by name.
  std::vector<std::map<std::string, std::vector<int>>> round(const std::vector<std::set<size_t>>& has,
                                                             std::set<size_t> evicted = {},
                                                             bool tracing = true) {
    const size_t span = cache.span(), slot_words = (span + 63) / 64, rank_words = 1;
    const bool active = late[0].active();
    const size_t extra = active ? late[0].words(slot_words, rank_words) : 0;
    std::vector<uint64_t> ready_and(slot_words, ~uint64_t(0)), extra_and(extra, ~uint64_t(0));
    for (int r = 0; r < kRanks; ++r) {
      CHECK_EQ(late[r].active(), active);  // every rank derives the same layout
      std::vector<uint64_t> ready(slot_words, 0), mine(extra, 0);
      for (size_t s : has[r]) ready[s / 64] |= uint64_t(1) << (s % 64);
      if (active) {
        CHECK_EQ(late[r].words(slot_words, rank_words), extra);
        late[r].contribute(mine.data(), ready.data(), slot_words, r, rank_words);
      }
      for (size_t i = 0; i < slot_words; ++i) ready_and[i] &= ready[i];
      for (size_t i = 0; i < extra; ++i) extra_and[i] &= mine[i];
    }
    std::vector<uint64_t> valid(slot_words, ~uint64_t(0));
    for (size_t s : evicted) valid[s / 64] &= ~(uint64_t(1) << (s % 64));
    std::vector<std::map<std::string, std::vector<int>>> out(kRanks);
    for (int r = 0; r < kRanks; ++r) {
      out[r] = late[r].observe(extra_and.data(), ready_and.data(), valid.data(), span, slot_words,
                               kRanks, rank_words, cache, members, tracing);
    }
    return out;
  }
};

using Late = std::map<std::string, std::vector<int>>;

TEST(late_ranks_on_the_cached_path) {
  Job job(3);
  // Round 0 only learns that some rank traces: nothing extra travels yet.
  for (const Late& l : job.round({{}, {}, {}})) CHECK(l.empty());
  // t0: ranks 0 and 2 have it, rank 1 comes two rounds later. t1: everyone at once.
  for (const Late& l : job.round({{0}, {}, {0}})) CHECK(l.empty());
  for (const Late& l : job.round({{0, 1}, {1}, {0, 1}})) {
    CHECK(l.size() == 0);  // t1 was ready with nobody late: nothing to name
  }
  auto decided = job.round({{0, 2}, {0}, {0}});
  for (const Late& l : decided) {
    CHECK(l == (Late{{"t0", {1}}}));  // every rank knows, not only the coordinator
  }
  // t2: rank 0 first; ranks 1 and 2 only in the round after the probe.
  job.round({{2}, {}, {}});
  job.round({{2}, {}, {}});
  for (const Late& l : job.round({{2}, {2}, {2}})) CHECK(l == (Late{{"t2", {1, 2}}}));
}

TEST(late_ranks_name_global_ranks_and_forget_evicted_slots) {
  Job job(2, {4, 7, 9});  // a process set of global ranks 4, 7, 9
  job.round({{}, {}, {}});
  job.round({{0, 1}, {0, 1}, {}});  // both wait for member 2
  job.round({{0, 1}, {0, 1}, {}}, {1});  // t1 is invalidated: its answer is dropped
  for (const Late& l : job.round({{0}, {0}, {0}})) CHECK(l == (Late{{"t0", {9}}}));
  // With no rank tracing, nothing extra travels and nothing is named.
  job.round({{1}, {}, {}}, {}, false);
  CHECK(!job.late[0].active());
  for (const Late& l : job.round({{1}, {1}, {1}}, {}, false)) CHECK(l.empty());
}

}  // namespace
}  // namespace hvdlite
