#include "algorithms/ring_allreduce.h"

#include <algorithm>

#include "algorithms/reduce.h"
#include "algorithms/ring_pass.h"

namespace hvdlite {

SpanBuffer::SpanBuffer(const std::vector<Span>& spans, size_t elem_size) : elem_size_(elem_size) {
  for (const Span& s : spans) {
    if (s.count == 0) continue;
    spans_.push_back(s);
    starts_.push_back(count_);
    count_ += s.count;
  }
}

SpanBuffer SpanBuffer::slice(size_t begin, size_t n) const {
  std::vector<Span> runs;
  for_each_run(begin, n, [&](char* p, size_t c) { runs.push_back({p, c}); });
  return SpanBuffer(runs, elem_size_);
}

size_t Segments::max_count() const {
  size_t m = 0;
  for (size_t c : count) m = std::max(m, c);
  return m;
}

Segments even_segments(size_t count, int parts) {
  Segments s;
  size_t base = count / parts, extra = count % parts, at = 0;
  for (int r = 0; r < parts; ++r) {
    size_t c = base + (static_cast<size_t>(r) < extra ? 1 : 0);
    s.offset.push_back(at);
    s.count.push_back(c);
    at += c;
  }
  return s;
}

// Both passes are RingPass's steps run back to back (ring_pass.h keeps the step logic).
void ring_reduce_scatter(Transport& t, const SpanBuffer& buf, const Segments& segs,
                         DataType dtype, ReduceOp op, double postscale,
                         std::vector<uint8_t>& scratch, size_t piece_bytes) {
  RingPass pass(RingPass::Kind::ReduceScatter, t, buf, segs, dtype, op, postscale, &scratch,
                piece_bytes);
  while (!pass.done()) {
    pass.post();
    pass.finish();
  }
}

void ring_allgather(Transport& t, const SpanBuffer& buf, const Segments& segs, size_t piece_bytes) {
  // dtype and op are unused by an all-gather; scratch likewise.
  RingPass pass(RingPass::Kind::Allgather, t, buf, segs, DataType::UInt8, ReduceOp::Sum, 1.0,
                nullptr, piece_bytes);
  while (!pass.done()) {
    pass.post();
    pass.finish();
  }
}

void ring_allreduce(Transport& t, const SpanBuffer& buf, DataType dtype, ReduceOp op,
                    double postscale, std::vector<uint8_t>& scratch, size_t piece_bytes,
                    std::chrono::steady_clock::time_point* reduce_scattered) {
  if (buf.count() == 0) return;
  Segments segs = even_segments(buf.count(), t.size());
  ring_reduce_scatter(t, buf, segs, dtype, op, postscale, scratch, piece_bytes);
  if (reduce_scattered) *reduce_scattered = std::chrono::steady_clock::now();
  ring_allgather(t, buf, segs, piece_bytes);
}

}  // namespace hvdlite
