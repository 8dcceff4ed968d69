// The coordinator's decision for one negotiation round: which tensors are ready on every rank,
// and whether the ranks agree about them. Pure function of the gathered requests, so it is
// testable on its own and every rank could compute it (only the coordinator does).
#pragma once

#include <vector>

#include "message.h"

namespace hvdlite {

// requests_by_rank[r] holds everything rank r has pending and not yet done through the cache.
// Returns one Response per ready tensor (errors included), in a deterministic order.
std::vector<Response> decide_ready(const std::vector<std::vector<Request>>& requests_by_rank);

}  // namespace hvdlite
