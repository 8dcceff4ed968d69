// Ring all-reduce = ring reduce-scatter + ring all-gather, over any Transport.
// Each step's segment travels in pieces so that reducing one piece overlaps receiving the next.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hvdlite.h"
#include "transport/transport.h"

namespace hvdlite {

// A buffer split into one segment per rank (in elements). Segment r ends up owned by rank r.
struct Segments {
  std::vector<size_t> offset, count;
  size_t max_count() const;
};

Segments even_segments(size_t count, int parts);

// In place on buf: afterwards segment r of rank r holds the reduction over all ranks.
// scratch is grown as needed to hold one segment.
void ring_reduce_scatter(Transport& t, void* buf, const Segments& segs, DataType dtype,
                         ReduceOp op, std::vector<uint8_t>& scratch, size_t piece_bytes);

// In place on buf: rank r contributes segment r; afterwards every rank has all segments.
void ring_allgather(Transport& t, void* buf, const Segments& segs, size_t elem_size,
                    size_t piece_bytes);

void ring_allreduce(Transport& t, void* buf, size_t count, DataType dtype, ReduceOp op,
                    std::vector<uint8_t>& scratch, size_t piece_bytes);

}  // namespace hvdlite
