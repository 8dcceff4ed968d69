// Tensor Fusion: ready all-reduces that share dtype, op, scaling and compression are packed
// into one persistent buffer (up to the fusion threshold), reduced by one ring all-reduce,
// and unpacked. A lone tensor that needs no conversion is reduced in place instead.
#pragma once

#include <functional>
#include <vector>

#include "config.h"
#include "handle.h"
#include "message.h"
#include "tensor_entry.h"
#include "transport/transport.h"

namespace hvdlite {

class AllreduceExecutor {
 public:
  using Complete = std::function<void(TensorEntry*, Outcome)>;
  AllreduceExecutor(Transport& transport, const Config& config, Complete complete);

  // entry is null on a joined rank, which contributes zeros.
  void add(const Response& response, TensorEntry* entry);
  // Runs every batch still open. Called at the end of each round.
  void flush();

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
  void run_in_place(const Batch& batch);
  void run_fused(const Batch& batch);

  Transport& transport_;
  const Config& config_;
  Complete complete_;
  std::vector<Batch> open_;
  std::vector<uint8_t> fusion_buffer_;  // persistent: grows to the largest batch, then reused
  std::vector<uint8_t> scratch_;        // ring receive buffer
};

}  // namespace hvdlite
