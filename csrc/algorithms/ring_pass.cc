#include "algorithms/ring_pass.h"

#include <algorithm>

#include "algorithms/reduce.h"

namespace hvdlite {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace

RingPass::RingPass(Kind kind, Transport& t, const SpanBuffer& buf, Segments segs, DataType dtype,
                   ReduceOp op, double postscale, std::vector<uint8_t>* scratch, size_t piece_bytes)
    : kind_(kind), t_(t), buf_(buf), segs_(std::move(segs)), dtype_(dtype), op_(op),
      postscale_(postscale), scratch_(scratch), es_(buf.elem_size()),
      piece_(std::max<size_t>(1, piece_bytes / buf.elem_size())), steps_(t.size() - 1) {
  if (kind_ == Kind::ReduceScatter && scratch_->size() < segs_.max_count() * es_) {
    scratch_->resize(segs_.max_count() * es_);
  }
  if (steps_ == 0) apply_postscale();  // a ring of one: nothing to wait for
}

void RingPass::apply_postscale() {
  if (kind_ != Kind::ReduceScatter || postscale_ == 1.0) return;
  const int r = t_.rank();
  buf_.for_each_run(segs_.offset[r], segs_.count[r],
                    [&](char* p, size_t c) { copy_scaled(p, p, c, dtype_, postscale_); });
}

void RingPass::post() {
  const int n = t_.size(), r = t_.rank(), s = step_;
  const int right = mod(r + 1, n), left = mod(r - 1, n);
  // Reduce-scatter step s: send segment r-s-1 (partially reduced) right, receive segment r-s-2
  // from the left into scratch. All-gather step s: forward segment r-s, receive r-s-1 in place.
  const bool rs = kind_ == Kind::ReduceScatter;
  const int send_seg = rs ? mod(r - s - 1, n) : mod(r - s, n);
  const int recv_seg = rs ? mod(r - s - 2, n) : mod(r - s - 1, n);
  // Sender and receiver cut a segment into the same messages: same pieces, same spans.
  incoming_.clear();
  size_t at = 0;
  for (size_t off = 0; off < segs_.count[recv_seg]; off += piece_) {
    buf_.for_each_run(segs_.offset[recv_seg] + off, std::min(piece_, segs_.count[recv_seg] - off),
                      [&](char* p, size_t c) {
                        if (rs) {
                          incoming_.push_back({t_.post_recv(scratch_->data() + at * es_, c * es_, left), p, c, at});
                          at += c;
                        } else {
                          t_.post_recv(p, c * es_, left);
                        }
                      });
  }
  for (size_t off = 0; off < segs_.count[send_seg]; off += piece_) {
    buf_.for_each_run(segs_.offset[send_seg] + off, std::min(piece_, segs_.count[send_seg] - off),
                      [&](char* p, size_t c) { t_.post_send(p, c * es_, right); });
  }
}

void RingPass::finish() {
  // Folding piece k in overlaps receiving piece k+1.
  for (const Incoming& in : incoming_) {
    t_.wait(in.id);
    reduce_into(in.dst, scratch_->data() + in.at * es_, in.count, dtype_, op_);
  }
  t_.wait_all();
  if (++step_ == steps_) apply_postscale();
}

}  // namespace hvdlite
