// All-gather, broadcast and reduce-scatter for more than 2 ranks on one host, through the
// shared area of shm_allreduce_nranks.h and its rounds (Note [the board] there): rank r's
// segment is what it contributes (all-gather: its rows; broadcast: the root's whole buffer,
// the others' nothing; reduce-scatter: its share of the rows), each owner puts its pieces in
// its result slot and the others copy them out; the reduce-scatter has each owner fold its
// share from its peers' staged copies, in the ring's order (bitwise as ring_reduce_scatter).
// Every rank must call the same collectives, in the same order as its all-reduces through
// the area, with the same sizes. Each counts into t.stats() as shm_allreduce_nranks does, and
// one shared_memory_collectives.
#pragma once

#include <cstddef>
#include <vector>

#include "hvdlite.h"
#include "algorithms/ring_allreduce.h"
#include "transport/transport.h"

namespace hvdlite {

// True where these may run: more than 2 ranks (2 ranks' area holds shm_allreduce.cc's
// queues instead) and shm_allreduce_nranks_available(t); the same on every rank.
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
