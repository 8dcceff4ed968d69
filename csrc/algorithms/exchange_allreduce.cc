#include "algorithms/exchange_allreduce.h"

#include <cstring>

#include "algorithms/reduce.h"

namespace hvdlite {
namespace {

// Messages follow the spans, so sender and receiver cut the buffer alike.
void post_recv_runs(Transport& t, const SpanBuffer& buf, char* into, int peer) {
  const size_t es = buf.elem_size();
  size_t at = 0;
  buf.for_each_run(0, buf.count(), [&](char*, size_t c) {
    t.post_recv(into + at * es, c * es, peer);
    at += c;
  });
}

void post_send_runs(Transport& t, const SpanBuffer& buf, int peer) {
  const size_t es = buf.elem_size();
  buf.for_each_run(0, buf.count(), [&](char* p, size_t c) { t.post_send(p, c * es, peer); });
}

// buf = (lower's data) op (higher's data); `theirs` holds the partner's data.
void combine(const SpanBuffer& buf, char* theirs, bool mine_is_lower, DataType dtype, ReduceOp op) {
  const size_t es = buf.elem_size();
  size_t at = 0;
  buf.for_each_run(0, buf.count(), [&](char* p, size_t c) {
    char* other = theirs + at * es;
    if (mine_is_lower) {
      reduce_into(p, other, c, dtype, op);
    } else {
      reduce_into(other, p, c, dtype, op);
      std::memcpy(p, other, c * es);
    }
    at += c;
  });
}

}  // namespace

void exchange_allreduce(Transport& t, const SpanBuffer& buf, DataType dtype, ReduceOp op,
                        double postscale, std::vector<uint8_t>& scratch) {
  const int n = t.size(), r = t.rank();
  const size_t es = buf.elem_size();
  if (buf.count() == 0) return;
  if (n > 1) {
    if (scratch.size() < buf.count() * es) scratch.resize(buf.count() * es);
    char* theirs = reinterpret_cast<char*>(scratch.data());
    int p2 = 1;
    while (p2 * 2 <= n) p2 *= 2;
    if (r >= p2) {  // hand the data to rank r - p2, get the result back
      post_send_runs(t, buf, r - p2);
      t.wait_all();
      buf.for_each_run(0, buf.count(), [&](char* p, size_t c) { t.post_recv(p, c * es, r - p2); });
      t.wait_all();
    } else {
      if (r + p2 < n) {  // fold in rank r + p2's data first
        post_recv_runs(t, buf, theirs, r + p2);
        t.wait_all();
        combine(buf, theirs, true, dtype, op);
      }
      for (int mask = 1; mask < p2; mask *= 2) {
        const int partner = r ^ mask;
        post_recv_runs(t, buf, theirs, partner);
        post_send_runs(t, buf, partner);
        t.wait_all();
        combine(buf, theirs, r < partner, dtype, op);
      }
      if (r + p2 < n) {
        post_send_runs(t, buf, r + p2);
        t.wait_all();
      }
    }
  }
  if (postscale != 1.0) {
    buf.for_each_run(0, buf.count(), [&](char* p, size_t c) { copy_scaled(p, p, c, dtype, postscale); });
  }
}

}  // namespace hvdlite
