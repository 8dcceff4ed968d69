#include "ring_allreduce.h"

#include <algorithm>

#include "reduce.h"

namespace hvdlite {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace

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

void ring_reduce_scatter(Transport& t, const SpanBuffer& buf, const Segments& segs,
                         DataType dtype, ReduceOp op, double postscale,
                         std::vector<uint8_t>& scratch, size_t piece_bytes) {
  const int n = t.size(), r = t.rank();
  const size_t es = dtype_size(dtype);
  if (n > 1) {
    const size_t piece = std::max<size_t>(1, piece_bytes / es);
    if (scratch.size() < segs.max_count() * es) scratch.resize(segs.max_count() * es);
    const int right = mod(r + 1, n), left = mod(r - 1, n);
    struct Incoming { int id; char* dst; size_t count; size_t at; };
    std::vector<Incoming> incoming;
    // Step s: send segment r-s-1 (partially reduced) right, receive segment r-s-2 from the
    // left and fold it in. After n-1 steps segment r has passed every rank and ends here.
    // Sender and receiver cut a segment into the same messages: same pieces, same spans.
    for (int s = 0; s < n - 1; ++s) {
      const int send_seg = mod(r - s - 1, n), recv_seg = mod(r - s - 2, n);
      incoming.clear();
      size_t at = 0;
      for (size_t off = 0; off < segs.count[recv_seg]; off += piece) {
        buf.for_each_run(segs.offset[recv_seg] + off, std::min(piece, segs.count[recv_seg] - off),
                         [&](char* p, size_t c) {
                           incoming.push_back({t.post_recv(scratch.data() + at * es, c * es, left), p, c, at});
                           at += c;
                         });
      }
      for (size_t off = 0; off < segs.count[send_seg]; off += piece) {
        buf.for_each_run(segs.offset[send_seg] + off, std::min(piece, segs.count[send_seg] - off),
                         [&](char* p, size_t c) { t.post_send(p, c * es, right); });
      }
      for (const Incoming& in : incoming) {
        t.wait(in.id);
        reduce_into(in.dst, scratch.data() + in.at * es, in.count, dtype, op);
      }
      t.wait_all();
    }
  }
  if (postscale != 1.0) {
    buf.for_each_run(segs.offset[r], segs.count[r],
                     [&](char* p, size_t c) { copy_scaled(p, p, c, dtype, postscale); });
  }
}

void ring_allgather(Transport& t, const SpanBuffer& buf, const Segments& segs, size_t piece_bytes) {
  const int n = t.size(), r = t.rank();
  if (n == 1) return;
  const size_t es = buf.elem_size();
  const size_t piece = std::max<size_t>(1, piece_bytes / es);
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  // Step s: forward segment r-s (own at s=0) right, receive segment r-s-1 from the left.
  for (int s = 0; s < n - 1; ++s) {
    const int send_seg = mod(r - s, n), recv_seg = mod(r - s - 1, n);
    for (size_t off = 0; off < segs.count[recv_seg]; off += piece) {
      buf.for_each_run(segs.offset[recv_seg] + off, std::min(piece, segs.count[recv_seg] - off),
                       [&](char* p, size_t c) { t.post_recv(p, c * es, left); });
    }
    for (size_t off = 0; off < segs.count[send_seg]; off += piece) {
      buf.for_each_run(segs.offset[send_seg] + off, std::min(piece, segs.count[send_seg] - off),
                       [&](char* p, size_t c) { t.post_send(p, c * es, right); });
    }
    t.wait_all();
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
