// Exchange (recursive doubling) all-reduce, for latency-bound sizes: every rank swaps its
// whole buffer with a partner log2(n) times (ranks beyond the largest power of two first
// hand theirs to a partner and get the result back). At 2 ranks that is one exchange where
// the ring needs two steps, each a message latency.
//
// Operands always combine lower rank first (the lower group's partial on the left), so
// every rank evaluates the same expression tree: results are bitwise identical everywhere,
// for every op, as the ring's are.
#pragma once

#include <cstdint>
#include <vector>

#include "hvdlite.h"
#include "algorithms/ring_allreduce.h"
#include "transport/transport.h"

namespace hvdlite {

// The reduction over all ranks, times postscale (applied by every rank to the same sum).
// scratch grows to the buffer's size. The span layout must be the same on every rank.
void exchange_allreduce(Transport& t, const SpanBuffer& buf, DataType dtype, ReduceOp op,
                        double postscale, std::vector<uint8_t>& scratch);

}  // namespace hvdlite
