// Which ranks came late to a tensor negotiated on the cached fast path, for the timeline's
// NEGOTIATE span (the coordinator path knows it from the requests it gathers). The round's
// bitwise AND only says whether every rank had a cached tensor pending, so while some rank
// traces, the round carries two more things:
//   any_ready[]  one bit per cached response, inverted: after the AND, set where no rank has
//                it pending; so every rank learns which responses some ranks wait for
//   probe[]      for each response that began to wait in the previous round, one bit per
//                rank, cleared by the ranks that had it pending then: the others came late
// Each response is probed once, in the round after it began to wait, so a long wait costs
// no more than a short one. Every rank derives the same layout from the previous round.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/response_cache.h"
#include "engine/validate.h"

namespace hvdlite {

class LateRanks {
 public:
  // Whether this round carries the words below (decided by the previous round, alike on
  // every rank).
  bool active() const { return active_; }
  // Words this round adds when active: any_ready for `slot_words`, then the probes.
  size_t words(size_t slot_words, size_t rank_words) const {
    return slot_words + probes_.size() * rank_words;
  }
  // Before the round: this rank's share, from the cached responses it has pending.
  void contribute(uint64_t* extra, const uint64_t* my_ready, size_t slot_words, int rank,
                  size_t rank_words);
  // After the round. ready/valid: the round's ANDed bits; tracing: some rank traces now.
  // Returns, for each response decided this round whose waiters were probed, the global ranks
  // that came late (by response name).
  std::map<std::string, std::vector<int>> observe(const uint64_t* extra, const uint64_t* ready,
                                                  const uint64_t* valid, size_t span,
                                                  size_t slot_words, int size, size_t rank_words,
                                                  const ResponseCache& cache,
                                                  const Membership& members, bool tracing);

 private:
  bool active_ = false;
  std::vector<uint64_t> my_ready_;           // this rank's ready bits in the last round
  std::vector<size_t> waiting_;              // slots some rank waited for in the last round
  std::vector<size_t> probes_;               // slots probed this round (began waiting last round)
  std::map<size_t, std::vector<int>> late_;  // probed slots still waiting: their late ranks
};

}  // namespace hvdlite
