// The tensors of one submission on one CUDA device, carried through the host algorithms.
//
// Note [device staging]
// At submission (the framework's thread, never blocking it):
//   - an event is recorded on the framework's current stream and hvdlite's stream waits on
//     it, so no copy starts before the producer's kernels have written the tensors;
//   - with several tensors, device-to-device copies fuse them into a device fusion buffer;
//   - one asynchronous copy moves that buffer (or the lone tensor) to a pinned host buffer,
//     and an event marks its end.
// The engine's entries point at the pinned buffer, so negotiation and every host algorithm
// (ring, shared memory, exchange, hierarchical) run unchanged. The engine's thread waits for
// the copy's event before it reads (before_read), not the framework's thread.
// When every entry has completed (after), one asynchronous copy moves the results back
// (into the device fusion buffer, then device-to-device into each output) and an event
// marks the end: the consumer's stream waits on it (consumer_wait), as after c10d's
// Work.wait(); only a caller with no stream blocks the host on it (host_wait).
// Buffers return to their pools with an event recorded after the last copy that uses them.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "device/cuda_runtime.h"
#include "device/device_context.h"
#include "engine/tensor_entry.h"

namespace hvdlite {
namespace device {

// What wait() needs of a submission's device side, whichever path it took.
class DeviceResults : public DeviceWork {
 public:
  // `consumer` waits for the results on the device; the host does not wait.
  virtual void consumer_wait(Stream consumer) = 0;
  virtual void host_wait() = 0;
};

// The NCCL path's side of a submission (its data never leaves the device): hvdlite's stream
// waits for the caller's at submission, and after the last entry's collective is queued,
// an event marks the results for the consumer.
class DeviceOrder : public DeviceResults {
 public:
  DeviceOrder(const CudaRuntime& cuda, int device, Stream producer, size_t entries);
  ~DeviceOrder() override;
  void before_read() override {}
  void after(bool ok) override;
  void consumer_wait(Stream consumer) override;
  void host_wait() override;

 private:
  const CudaRuntime& cuda_;
  DeviceContext& context_;
  Event done_ = nullptr;
  std::atomic<size_t> remaining_;
  std::atomic<bool> done_recorded_{false};
};

class DeviceStaging : public DeviceResults {
 public:
  struct Tensor {
    const void* input;  // device memory
    void* output;       // device memory, or null when the result stays on the host
    size_t bytes;
  };
  // `producer`: the framework's current stream (0: the legacy default stream).
  DeviceStaging(const CudaRuntime& cuda, int device, Stream producer, std::vector<Tensor> tensors);
  ~DeviceStaging() override;

  // Where tensor i's data lives on the host while the engine works on it.
  void* host(size_t i) const { return static_cast<char*>(host_.data) + offsets_[i]; }

  void before_read() override;
  void after(bool ok) override;

  void consumer_wait(Stream consumer) override;
  void host_wait() override;
  // True once after() has run for every tensor.
  bool finished() const { return remaining_.load() == 0; }

 private:
  const CudaRuntime& cuda_;
  DeviceContext& context_;
  std::vector<Tensor> tensors_;
  std::vector<size_t> offsets_;  // of each tensor in the fusion buffers
  size_t total_ = 0;
  DeviceContext::Buffer host_, fused_;  // fused_: only with several device tensors
  Event staged_ = nullptr, done_ = nullptr;
  std::atomic<bool> read_{false};
  std::atomic<size_t> remaining_;
  bool ok_ = true;  // the driver thread only
  std::atomic<bool> done_recorded_{false};
};

}  // namespace device
}  // namespace hvdlite
