#include "ring_allreduce.h"

#include <algorithm>

#include "reduce.h"

namespace hvdlite {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

// Piece boundaries of a segment: every piece but the last holds piece_elems elements.
size_t piece_elems_for(size_t piece_bytes, size_t elem_size) {
  return std::max<size_t>(1, piece_bytes / elem_size);
}

}  // namespace

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

void ring_reduce_scatter(Transport& t, void* buf, const Segments& segs, DataType dtype,
                         ReduceOp op, std::vector<uint8_t>& scratch, size_t piece_bytes) {
  const int n = t.size(), r = t.rank();
  if (n == 1) return;
  const size_t es = dtype_size(dtype);
  const size_t pe = piece_elems_for(piece_bytes, es);
  if (scratch.size() < segs.max_count() * es) scratch.resize(segs.max_count() * es);
  char* base = static_cast<char*>(buf);
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  // Step s: send segment r-s-1 (partially reduced) right, receive segment r-s-2 from the left
  // and fold it in. After n-1 steps segment r has passed through every rank and ends here.
  for (int s = 0; s < n - 1; ++s) {
    const int send_seg = mod(r - s - 1, n), recv_seg = mod(r - s - 2, n);
    std::vector<int> recv_ids;
    for (size_t off = 0; off < segs.count[recv_seg]; off += pe) {
      size_t c = std::min(pe, segs.count[recv_seg] - off);
      recv_ids.push_back(t.post_recv(scratch.data() + off * es, c * es, left));
    }
    for (size_t off = 0; off < segs.count[send_seg]; off += pe) {
      size_t c = std::min(pe, segs.count[send_seg] - off);
      t.post_send(base + (segs.offset[send_seg] + off) * es, c * es, right);
    }
    size_t off = 0;
    for (int id : recv_ids) {
      size_t c = std::min(pe, segs.count[recv_seg] - off);
      t.wait(id);
      reduce_into(base + (segs.offset[recv_seg] + off) * es, scratch.data() + off * es, c, dtype, op);
      off += c;
    }
    t.wait_all();
  }
}

void ring_allgather(Transport& t, void* buf, const Segments& segs, size_t es, size_t piece_bytes) {
  const int n = t.size(), r = t.rank();
  if (n == 1) return;
  const size_t pe = piece_elems_for(piece_bytes, es);
  char* base = static_cast<char*>(buf);
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  // Step s: forward segment r-s (own at s=0) right, receive segment r-s-1 from the left.
  for (int s = 0; s < n - 1; ++s) {
    const int send_seg = mod(r - s, n), recv_seg = mod(r - s - 1, n);
    for (size_t off = 0; off < segs.count[recv_seg]; off += pe) {
      size_t c = std::min(pe, segs.count[recv_seg] - off);
      t.post_recv(base + (segs.offset[recv_seg] + off) * es, c * es, left);
    }
    for (size_t off = 0; off < segs.count[send_seg]; off += pe) {
      size_t c = std::min(pe, segs.count[send_seg] - off);
      t.post_send(base + (segs.offset[send_seg] + off) * es, c * es, right);
    }
    t.wait_all();
  }
}

void ring_allreduce(Transport& t, void* buf, size_t count, DataType dtype, ReduceOp op,
                    std::vector<uint8_t>& scratch, size_t piece_bytes) {
  if (t.size() == 1 || count == 0) return;
  Segments segs = even_segments(count, t.size());
  ring_reduce_scatter(t, buf, segs, dtype, op, scratch, piece_bytes);
  ring_allgather(t, buf, segs, dtype_size(dtype), piece_bytes);
}

}  // namespace hvdlite
