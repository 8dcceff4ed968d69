#include "algorithms/shm_collectives_nranks.h"

#include <cstring>

#include "algorithms/shm_allreduce.h"
#include "algorithms/shm_allreduce_nranks.h"

namespace hvdlite {
namespace {

// Two ranks' area holds shm_allreduce.cc's queues, more ranks' the board of run_rounds.
void rounds(Transport& t, const SpanBuffer& buf, const Segments& segs, DataType dtype,
            ReduceOp op, double postscale, Halves halves) {
  if (t.size() == 2) {
    shm_two_ranks(ShmPort::of(t), buf, segs, dtype, op, postscale, halves);
  } else {
    run_rounds(ShmPort::of(t), buf, segs, dtype, op, postscale, halves);
  }
}

}  // namespace

bool shm_collectives_nranks_available(Transport& t) {
  return t.size() > 2 && shm_allreduce_nranks_available(t);
}

bool shm_collectives_available(Transport& t) {
  return t.size() >= 2 && shm_allreduce_available(t);
}

void shm_allgatherv_nranks(Transport& t, const void* send, void* recv,
                           const std::vector<size_t>& bytes_per_rank) {
  Segments segs;
  size_t total = 0;
  for (size_t b : bytes_per_rank) {
    segs.offset.push_back(total);
    segs.count.push_back(b);
    total += b;
  }
  char* out = static_cast<char*>(recv);
  const int me = t.rank();
  if (segs.count[me] > 0 && out + segs.offset[me] != send) {
    std::memcpy(out + segs.offset[me], send, segs.count[me]);
  }
  rounds(t, SpanBuffer({{out, total}}, 1), segs, DataType::UInt8, ReduceOp::Sum, 1.0,
             Halves{false, true});
  t.stats().shared_memory_collectives += 1;
}

void shm_broadcast_nranks(Transport& t, void* buf, size_t bytes, int root) {
  Segments segs;
  segs.offset.assign(static_cast<size_t>(t.size()), 0);
  segs.count.assign(static_cast<size_t>(t.size()), 0);
  segs.count[root] = bytes;
  rounds(t, SpanBuffer({{static_cast<char*>(buf), bytes}}, 1), segs, DataType::UInt8,
             ReduceOp::Sum, 1.0, Halves{false, true});
  t.stats().shared_memory_collectives += 1;
}

void shm_reduce_scatter_nranks(Transport& t, const SpanBuffer& buf, const Segments& segs,
                               DataType dtype, ReduceOp op, double postscale) {
  rounds(t, buf, segs, dtype, op, postscale, Halves{true, false});
  t.stats().shared_memory_collectives += 1;
}

}  // namespace hvdlite
