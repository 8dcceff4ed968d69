// All-gather, broadcast and reduce-scatter for the ranks of one host, through the shared area:
// at more than 2 ranks the rounds of shm_allreduce_nranks.h (Note [the board] there), at 2
// the queues of shm_allreduce.h. Rank r's segment is what it contributes (all-gather: its
// rows; broadcast: the root's whole buffer, the others' nothing; reduce-scatter: its share of
// the rows), each owner sends its pieces and the others copy them out; the reduce-scatter has
// each owner fold its share from its peers' staged copies, in the ring's order (bitwise as
// ring_reduce_scatter). Every rank must call the same collectives, in the same order as its
// all-reduces through the area, with the same sizes. Each counts into t.stats() as the
// all-reduce through the area does, and one shared_memory_collectives.
#pragma once

#include <cstddef>
#include <vector>

#include "hvdlite.h"
#include "algorithms/ring_allreduce.h"
#include "transport/transport.h"

namespace hvdlite {

// True where these may run: 2 or more ranks with a shared area (shm_allreduce_available);
// the same on every rank.
bool shm_collectives_available(Transport& t);

// True where the area holds the board of shm_allreduce_nranks.h (more than 2 ranks), which
// the negotiation's gathered rounds also use; the same on every rank.
bool shm_collectives_nranks_available(Transport& t);

// As Transport::allgatherv: rank r's send_bytes (bytes_per_rank[r]) land at its offset of recv.
void shm_allgatherv_nranks(Transport& t, const void* send, void* recv,
                           const std::vector<size_t>& bytes_per_rank);

// As Transport::broadcast: root's buf reaches every rank's.
void shm_broadcast_nranks(Transport& t, void* buf, size_t bytes, int root);

// As ring_reduce_scatter: afterwards segment r (segs, in elements) of rank r's buf holds the
// reduction over all ranks, times postscale; the other segments hold this rank's input.
void shm_reduce_scatter_nranks(Transport& t, const SpanBuffer& buf, const Segments& segs,
                               DataType dtype, ReduceOp op, double postscale);

}  // namespace hvdlite
