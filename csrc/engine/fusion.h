// Tensor Fusion: ready all-reduces that share dtype, op, scaling and compression form a batch
// (up to the fusion threshold) reduced by ONE ring all-reduce. Small tensors, and tensors
// that travel compressed, are packed into a persistent fusion buffer; larger ones take part
// in place, as further spans of the same logical buffer, so they are never copied.
#pragma once

#include <functional>
#include <vector>

#include "engine/config.h"
#include "engine/handle.h"
#include "algorithms/hierarchical.h"
#include "algorithms/lane_threads.h"
#include "engine/message.h"
#include "engine/tensor_entry.h"
#include "transport/transport.h"

namespace hvdlite {

// Merged negotiation rounds (controller.h) carry small cached all-reduces of one kind: their
// inputs, prescaled, back to back in `entries` order.
void pack_prereduce(const std::vector<TensorEntry*>& entries, void* dst);

class AllreduceExecutor {
 public:
  using Complete = std::function<void(TensorEntry*, Outcome)>;
  AllreduceExecutor(Transport& transport, const Config& config, Complete complete);

  // Batches then run hierarchically (before the loop starts; null: the flat ring).
  void use_hierarchy(Hierarchy* hierarchy) { hierarchy_ = hierarchy; }

  // entry is null on a joined rank, which contributes zeros.
  void add(const Response& response, TensorEntry* entry);
  // Runs every batch still open. Called at the end of each round.
  void flush();
  // A merged round reduced these entries' data (pack_prereduce's layout) already: postscale
  // it into each output and complete the entries.
  void complete_prereduced(const std::vector<TensorEntry*>& entries, const void* reduced);

 private:
  struct Member {
    TensorEntry* entry;
    size_t offset, count;  // in elements, within the batch
  };
  struct Batch {
    Response key;  // dtype, reduce op, scales, compression shared by all members
    DataType wire;
    std::vector<Member> members;
    size_t count = 0;
  };
  void run(Batch& batch);
  void run_adasum(Batch& batch);  // Note [Adasum per tensor] in algorithms/adasum.h
  struct Watched;
  // Calls `step` on each watched member's share of host bytes [p, p + bytes).
  static void visit(const std::vector<Watched>& watched, const char* p, size_t bytes,
                    void (DeviceWork::*step)(const void*, size_t));

  Transport& transport_;
  const Config& config_;
  Complete complete_;
  Hierarchy* hierarchy_ = nullptr;
  std::vector<Batch> open_;
  std::vector<uint8_t> fusion_buffer_;  // persistent: grows to the largest batch, then reused
  std::vector<uint8_t> zeros_;          // a joined rank's stand-in for in-place tensors
  std::vector<uint8_t> scratch_;        // ring receive buffer
  LaneThreads lane_threads_;            // large shared-memory all-reduces' lanes (shm_lanes.h)
  size_t round_bytes_ = 0;              // bytes reduced since the last flush (timeline counter)
};

}  // namespace hvdlite
