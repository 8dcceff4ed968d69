// The coordinator's decision for one negotiation round: which tensors are ready on every rank,
// and whether the ranks agree about them. Pure function of the gathered requests, so it is
// testable on its own and every rank could compute it (only the coordinator does).
#pragma once

#include <string>
#include <vector>

#include "engine/message.h"

namespace hvdlite {

// Whose requests are decided: a process set's id and the global rank of each member, so that
// messages name ranks as the user knows them (hvdlite.rank()), and name the set.
struct Membership {
  int set_id = 0;
  std::vector<int> global_ranks;  // global_ranks[r] is member r; empty for the global set

  int global(int r) const { return global_ranks.empty() ? r : global_ranks[r]; }
  bool contains(int global_rank, int size) const;
  // "the global process set" or "process set 1 (ranks 0, 2)".
  std::string name() const;
  // "" for the global set, else " in process set 1 (ranks 0, 2)".
  std::string where() const { return set_id == 0 ? "" : " in " + name(); }
};

// requests_by_rank[r] holds everything member r has pending and not yet done through the
// cache. Returns one Response per ready tensor (errors included), in a deterministic order.
std::vector<Response> decide_ready(const std::vector<std::vector<Request>>& requests_by_rank,
                                   const Membership& members = {});

}  // namespace hvdlite
