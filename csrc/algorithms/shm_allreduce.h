// Shared-memory all-reduce for the ranks of one host (Transport::shared_area()). At more than
// two ranks it is shm_allreduce_nranks.h (a reduce-scatter plus an all-gather through the
// area); at two, the queues below, which overlap every stage of every piece.
//
// Two ranks: each rank
// owns half of the buffer, as in the ring. Pieces of the half a rank does not own go to the
// peer through a queue in the shared area; the owner reduces each one straight from there
// into its own buffer (applying the postscale), and sends the result back through a second
// queue, from which the peer copies it into place. No MPI message, matching or rendezvous,
// and no scratch buffer; the pieces are small enough to stay in cache, and every stage of
// every piece overlaps the others.
//
// Each element is reduced once, by its owner, with the ring's kernels and operand order
// (own (op) peer's), and scaled once: results are bitwise identical on both ranks, and to
// the ring's.
#pragma once

#include <cstddef>
#include <functional>

#include "hvdlite.h"
#include "algorithms/lane_threads.h"
#include "algorithms/ring_allreduce.h"
#include "algorithms/shm_allreduce_nranks.h"
#include "transport/transport.h"

namespace hvdlite {

// True when `t` can run shm_allreduce (2 or more ranks with a shared area large enough);
// the same on every rank.
bool shm_allreduce_available(Transport& t);

// The reduction of every rank's `buf`, times postscale, on every rank. All must call it for
// the same collectives in the same order, with the same element count and size. Large ones
// run in lanes (shm_lanes.h), on `threads` (null: threads started for this call).
void shm_allreduce(Transport& t, const SpanBuffer& buf, DataType dtype, ReduceOp op,
                   double postscale, LaneThreads* threads = nullptr);

// The two-rank queues over segments of any sizes (segs.count[r]: rank r's), as run_rounds is
// for more ranks: the reduce-scatter half (each side reduces its segment from the peer's raw
// pieces and scales it), the all-gather half (each side sends its segment, the peer copies
// it into place), or both (shm_allreduce). Every collective through the queues, whichever
// halves it runs, keeps both sides' counters in step.
//
// `reduce` (if set) replaces the reduce-scatter half's reduction and postscale: it is called
// with each run of this side's segment in order (`own`: `count` elements from element `at` of
// buf, contiguous) and the peer's raw copy of them (`peers`), and may write `own` or only
// read it (Adasum's dot products: Note [Adasum through shared memory] in adasum.cc).
using ShmReduce = std::function<void(char* own, const char* peers, size_t at, size_t count)>;
void shm_two_ranks(const ShmPort& t, const SpanBuffer& buf, const Segments& segs, DataType dtype,
                   ReduceOp op, double postscale, Halves halves, const ShmReduce* reduce = nullptr);

}  // namespace hvdlite
