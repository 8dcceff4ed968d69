// Ring all-reduce = ring reduce-scatter + ring all-gather, over any Transport.
// The data is a SpanBuffer: spans of memory (e.g. the tensors of a fusion batch, used in
// place) seen as one logical buffer. Each step's segment travels in pieces so that reducing
// one piece overlaps receiving the next.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hvdlite.h"
#include "transport/transport.h"

namespace hvdlite {

struct Span {
  void* data;
  size_t count;  // elements
};

class SpanBuffer {
 public:
  SpanBuffer(const std::vector<Span>& spans, size_t elem_size);
  size_t count() const { return count_; }
  size_t elem_size() const { return elem_size_; }
  // The logical elements [begin, begin + n) as a buffer of their own.
  SpanBuffer slice(size_t begin, size_t n) const;
  // Calls fn(pointer, elements) for each contiguous run covering logical [begin, begin + n).
  template <typename F>
  void for_each_run(size_t begin, size_t n, F&& fn) const;

 private:
  std::vector<Span> spans_;
  std::vector<size_t> starts_;  // logical index of each span's first element
  size_t elem_size_;
  size_t count_ = 0;
};

// One segment per rank (in logical elements). Segment r ends up owned by rank r.
struct Segments {
  std::vector<size_t> offset, count;
  size_t max_count() const;
};

Segments even_segments(size_t count, int parts);

// Afterwards segment r of rank r holds the reduction over all ranks, multiplied by
// postscale. scratch grows as needed to hold one segment.
void ring_reduce_scatter(Transport& t, const SpanBuffer& buf, const Segments& segs,
                         DataType dtype, ReduceOp op, double postscale,
                         std::vector<uint8_t>& scratch, size_t piece_bytes);

// Rank r contributes segment r; afterwards every rank has all segments.
void ring_allgather(Transport& t, const SpanBuffer& buf, const Segments& segs,
                    size_t piece_bytes);

// The reduction over all ranks, times postscale (applied once, by each segment's owner, so
// every rank ends with bitwise-identical results).
// reduce_scattered, when given, receives the time the reduce-scatter half ended (timeline).
void ring_allreduce(Transport& t, const SpanBuffer& buf, DataType dtype, ReduceOp op,
                    double postscale, std::vector<uint8_t>& scratch, size_t piece_bytes,
                    std::chrono::steady_clock::time_point* reduce_scattered = nullptr);

template <typename F>
void SpanBuffer::for_each_run(size_t begin, size_t n, F&& fn) const {
  if (n == 0) return;
  size_t i = 0, lo = 0, hi = starts_.size();
  while (hi - lo > 1) {  // last span starting at or before begin
    size_t mid = (lo + hi) / 2;
    if (starts_[mid] <= begin) lo = mid; else hi = mid;
  }
  i = lo;
  while (n > 0) {
    size_t within = begin - starts_[i];
    size_t take = std::min(n, spans_[i].count - within);
    fn(static_cast<char*>(spans_[i].data) + within * elem_size_, take);
    begin += take;
    n -= take;
    ++i;
  }
}

}  // namespace hvdlite
