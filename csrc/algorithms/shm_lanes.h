// Large shared-memory all-reduces in lanes: several threads per rank, each carrying a part
// of the buffer through an area of its own.
//
// Note [lanes]
// One thread moves memory at about one core's bandwidth, and a host with more cores than
// ranks has more to give: on the 16-core GPU host, two ranks reduced 64 MiB in 13.5-15 ms
// while the cores together copy several times faster. So an all-reduce of at least
// kLaneMinBytes through shared memory runs in Transport::lanes() lanes:
//   - lane k takes part k of every rank's segment (segments as the ring's), so each element
//     keeps its owner and the ring's operand order: results stay bitwise the ring's;
//   - each lane runs the same algorithm (shm_allreduce.cc's queues at 2 ranks, run_rounds at
//     more) through its own area (Transport::lane_area), whose counters only that lane's
//     parts ever move, so the lanes of all ranks stay in step without a handshake;
//   - lane 0 runs on the calling thread, the others on threads kept between calls
//     (lane_threads.h).
// Only the calling thread talks to the transport. Another lane's wait spins and yields, and
// gives up when told to; the calling thread, its own lane done, waits for the others with the
// transport's wait policy (which notices a lost peer). On any error it tells the other lanes
// to give up and waits until they have before it throws: a lost peer means a new transport and new
// areas anyway (Note [a lost peer] in shm_allreduce.cc).
#pragma once

#include <cstddef>

#include "hvdlite.h"
#include "algorithms/lane_threads.h"
#include "algorithms/ring_allreduce.h"
#include "transport/transport.h"

namespace hvdlite {

constexpr size_t kLaneMinBytes = size_t(4) << 20;

// True when an all-reduce of `bytes` through `t`'s shared area runs in lanes.
bool shm_runs_in_lanes(Transport& t, size_t bytes);

// shm_allreduce's result (the reduction of every rank's `buf`, times postscale), in lanes,
// lanes 1.. on `threads`.
void shm_allreduce_in_lanes(Transport& t, const SpanBuffer& buf, DataType dtype, ReduceOp op,
                            double postscale, LaneThreads& threads);

}  // namespace hvdlite
