// One CUDA device as hvdlite uses it: its own non-blocking stream, on which every copy of
// hvdlite's is issued, and pools of pinned host and device buffers. A buffer goes back to
// its pool with the event after which it is free; it is handed out again only once that
// event has completed, so a later request never overwrites memory a copy still reads.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "device/cuda_runtime.h"

namespace hvdlite {
namespace device {

// Makes `device` current on this thread for the scope, and restores the previous one.
class DeviceGuard {
 public:
  DeviceGuard(const CudaRuntime& cuda, int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  const CudaRuntime& cuda_;
  int previous_ = -1;
};

class DeviceContext {
 public:
  struct Buffer {
    void* data = nullptr;
    size_t bytes = 0;
    bool pinned = false;  // pinned host memory; else device memory
  };

  // The context of `device`, created on first use (its stream on that device).
  static DeviceContext& get(const CudaRuntime& cuda, int device);

  int device() const { return device_; }
  Stream stream() const { return stream_; }
  // A second stream for copies back to the device while stream() still copies to the host:
  // a GPU runs the two directions at once only from different streams.
  Stream upload_stream() const { return upload_stream_; }
  // A buffer of at least `bytes`, reused from the pool when one is free; an OutOfMemory
  // Error where CUDA has no room even after trim().
  Buffer acquire(size_t bytes, bool pinned);
  // Gives the buffers not in use back to CUDA (after their events).
  void trim();
  // Back to the pool, free once `after` (owned from now on; may be null: free now) completes.
  void release(Buffer buffer, Event after);
  Event new_event();

 private:
  DeviceContext(const CudaRuntime& cuda, int device);

  struct Slot {
    Buffer buffer;
    Event after = nullptr;
    bool in_use = false;
  };
  const CudaRuntime& cuda_;
  int device_;
  Stream stream_ = nullptr;
  Stream upload_stream_ = nullptr;
  std::mutex mu_;
  std::vector<Slot> slots_;  // guarded by mu_
};

}  // namespace device
}  // namespace hvdlite
