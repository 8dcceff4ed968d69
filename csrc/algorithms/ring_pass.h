// One ring reduce-scatter or all-gather run a step at a time: post() starts a step's receives
// and sends, finish() waits for them and folds what came in. Passes over different
// transports can then be in flight together, e.g. hierarchical all-reduce's cross-host ring
// of one chunk while the next chunk is reduce-scattered within the host. The steps and
// their pieces are those of ring_reduce_scatter / ring_allgather (ring_allreduce.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/ring_allreduce.h"

namespace hvdlite {

class RingPass {
 public:
  enum class Kind { ReduceScatter, Allgather };

  // scratch (reduce-scatter only) must not be used by another pass in flight at the same time.
  RingPass(Kind kind, Transport& t, const SpanBuffer& buf, Segments segs, DataType dtype,
           ReduceOp op, double postscale, std::vector<uint8_t>* scratch, size_t piece_bytes);

  bool done() const { return step_ >= steps_; }
  int steps() const { return steps_; }
  void post();    // the next step's receives and sends; at most one step of a transport in flight
  void finish();  // completes that step; after the last one the owner applies postscale

 private:
  void apply_postscale();  // by the owner of each segment, once per element

  struct Incoming { int id; char* dst; size_t count; size_t at; };
  Kind kind_;
  Transport& t_;
  SpanBuffer buf_;
  Segments segs_;
  DataType dtype_;
  ReduceOp op_;
  double postscale_;
  std::vector<uint8_t>* scratch_;
  size_t es_, piece_;
  int steps_, step_ = 0;
  std::vector<Incoming> incoming_;
};

}  // namespace hvdlite
