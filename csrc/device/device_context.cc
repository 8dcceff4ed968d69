#include "device/device_context.h"

#include <map>
#include <memory>
#include <string>

#include "hvdlite.h"

namespace hvdlite {
namespace device {

DeviceGuard::DeviceGuard(const CudaRuntime& cuda, int device) : cuda_(cuda) {
  check(cuda_.GetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device) check(cuda_.SetDevice(device), "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() {
  int now = -1;
  if (cuda_.GetDevice(&now) == kSuccess && now != previous_) cuda_.SetDevice(previous_);
}

DeviceContext& DeviceContext::get(const CudaRuntime& cuda, int device) {
  static std::mutex mu;
  // Never destroyed: copies may still run when the process exits.
  static auto* contexts = new std::map<int, std::unique_ptr<DeviceContext>>();
  std::lock_guard<std::mutex> lk(mu);
  auto& slot = (*contexts)[device];
  if (!slot) slot.reset(new DeviceContext(cuda, device));
  return *slot;
}

DeviceContext::DeviceContext(const CudaRuntime& cuda, int device) : cuda_(cuda), device_(device) {
  DeviceGuard on(cuda_, device_);
  // Non-blocking: hvdlite's copies never serialise with the legacy default stream.
  check(cuda_.StreamCreateWithFlags(&stream_, kStreamNonBlocking), "cudaStreamCreateWithFlags");
  check(cuda_.StreamCreateWithFlags(&upload_stream_, kStreamNonBlocking), "cudaStreamCreateWithFlags (uploads)");
}

Event DeviceContext::new_event() {
  DeviceGuard on(cuda_, device_);
  Event e = nullptr;
  check(cuda_.EventCreateWithFlags(&e, kEventDisableTiming), "cudaEventCreateWithFlags");
  return e;
}

DeviceContext::Buffer DeviceContext::acquire(size_t bytes, bool pinned) {
  bytes = bytes == 0 ? 1 : bytes;
  {
    std::lock_guard<std::mutex> lk(mu_);
    Slot* best = nullptr;
    for (Slot& s : slots_) {
      // At most 4x too big: a huge buffer is not tied up by a tiny request.
      if (s.in_use || s.buffer.pinned != pinned || s.buffer.bytes < bytes || s.buffer.bytes > 4 * bytes + 4096) continue;
      if (s.after && cuda_.EventQuery(s.after) != kSuccess) continue;
      if (!best || s.buffer.bytes < best->buffer.bytes) best = &s;
    }
    if (best) {
      if (best->after) cuda_.EventDestroy(best->after);
      best->after = nullptr;
      best->in_use = true;
      return best->buffer;
    }
  }
  // Rounded up to a power of two (from 4 KiB) so that sizes that vary a little share buffers.
  size_t rounded = 4096;
  while (rounded < bytes) rounded *= 2;
  Buffer b{nullptr, rounded, pinned};
  DeviceGuard on(cuda_, device_);
  auto allocate = [&] {
    return pinned ? cuda_.HostAlloc(&b.data, rounded, kHostAllocPortable) : cuda_.Malloc(&b.data, rounded);
  };
  int rc = allocate();
  if (rc != kSuccess) {
    // The pool's free buffers may be what fills the device: give them back, then try again.
    trim();
    rc = allocate();
  }
  if (rc != kSuccess) {
    throw Error(Status::OutOfMemory,
                std::string(pinned ? "cudaHostAlloc of " : "cudaMalloc of ") + std::to_string(rounded) +
                " bytes (" + (pinned ? "pinned staging buffer" : "device buffer") + " of device " +
                std::to_string(device_) + ") failed with error " + std::to_string(rc) + " (" +
                cuda_.GetErrorString(rc) + ")");
  }
  std::lock_guard<std::mutex> lk(mu_);
  slots_.push_back(Slot{b, nullptr, true});
  return b;
}

void DeviceContext::trim() {
  std::vector<Slot> freed;
  {
    std::lock_guard<std::mutex> lk(mu_);
    std::vector<Slot> kept;
    for (Slot& s : slots_) (s.in_use ? kept : freed).push_back(s);
    slots_.swap(kept);
  }
  DeviceGuard on(cuda_, device_);
  for (Slot& s : freed) {
    if (s.after) {
      cuda_.EventSynchronize(s.after);
      cuda_.EventDestroy(s.after);
    }
    if (s.buffer.pinned) cuda_.FreeHost(s.buffer.data);
    else cuda_.Free(s.buffer.data);
  }
}

void DeviceContext::release(Buffer buffer, Event after) {
  std::lock_guard<std::mutex> lk(mu_);
  for (Slot& s : slots_) {
    if (s.buffer.data == buffer.data) {
      s.in_use = false;
      s.after = after;
      return;
    }
  }
  if (after) cuda_.EventDestroy(after);
}

}  // namespace device
}  // namespace hvdlite
