// Shared-memory all-reduce for any number of ranks on one host (Transport::shared_area()),
// as a reduce-scatter plus an all-gather through one segment: rank g owns segment g of the
// buffer (even_segments, as in the ring). The buffer goes in rounds; round i covers piece i
// of every segment. Each rank stages its pieces of the other ranks' segments in its own slot
// of the area; each owner reduces its piece straight from its peers' staged copies into its
// own buffer (applying the postscale) and leaves the result in its result slot, from which
// the others copy it into place. The pieces are small enough to stay in cache, and the slots
// hold a few rounds, so a rank may stage the next round while its peers still copy out.
//
// Bitwise identical to the ring: each element of segment g is reduced by its owner with the
// ring's kernel, in the ring's order and operand positions (the ring's reduce-scatter folds
// x[g+1] into x[g+2], that into x[g+3], ..., and the result into x[g]: dst = own (op)
// received), and scaled once.
#pragma once

#include <cstddef>

#include "hvdlite.h"
#include "algorithms/ring_allreduce.h"
#include "algorithms/shm_port.h"
#include "transport/transport.h"

namespace hvdlite {

// True when `t` can run shm_allreduce_nranks (2 or more ranks with a shared area that holds
// the rounds' slots); the same on every rank.
bool shm_allreduce_nranks_available(Transport& t);

// The bytes of one segment piece `t`'s area allows (a multiple of 64 bytes; 0: too small).
size_t shm_allreduce_nranks_piece_bytes(size_t area_bytes, int ranks);

// The reduction of every rank's `buf`, times postscale, on every rank. All must call it for
// the same collectives in the same order, with the same element count and size. Counts into
// t.stats(): bytes_sent/received as the ring's exchange with the others, the bytes this rank
// copies to and from the area (2 x buffer - its own segment) and the rounds.
void shm_allreduce_nranks(Transport& t, const SpanBuffer& buf, DataType dtype, ReduceOp op,
                          double postscale);

// Its halves alone, over the same area (the stages of hierarchical all-reduce). Segments are
// even_segments(buf.count(), t.size()), as the ring's. The reduce-scatter leaves segment r of
// rank r's buffer reduced and scaled, bitwise as ring_reduce_scatter does (the others'
// segments hold this rank's input still); the all-gather sends segment r of rank r to every
// rank, as ring_allgather does.
void shm_reduce_scatter_nranks(Transport& t, const SpanBuffer& buf, DataType dtype, ReduceOp op,
                               double postscale);
void shm_allgather_nranks(Transport& t, const SpanBuffer& buf);

// The rounds themselves, over segments of any sizes (segment r: rank r's, of buf.count()
// elements in all): the reduce-scatter half (stage, then each owner folds its piece from its
// peers' staged copies into its own buffer and scales it), the all-gather half (each owner
// leaves its piece in its result slot, the others copy it into place), or both. Any of them
// runs rounds of the same board, so the counters stay in step; the other collectives
// (shm_collectives_nranks.h) are made of them.
struct Halves {
  bool scatter, gather;
};
void run_rounds(const ShmPort& t, const SpanBuffer& buf, const Segments& segs, DataType dtype,
                ReduceOp op, double postscale, Halves halves);

}  // namespace hvdlite
