#include "device/device_outputs.h"

#include <map>
#include <mutex>
#include <string>

namespace hvdlite {
namespace device {
namespace {

struct Taken {
  DeviceContext* context;
  DeviceContext::Buffer buffer;
  Stream consumer;
  bool handed;  // to a caller (device_output_consumed_on)
};

struct Registry {
  std::mutex mu;
  std::map<void*, Taken> taken;
  size_t given_back = 0;
};

Registry& registry() {
  // Never destroyed: arrays may die while the process exits.
  static auto* r = new Registry();
  return *r;
}

}  // namespace

OwnedBuffer take_device_output(DeviceContext& context, size_t bytes) {
  DeviceContext::Buffer b = context.acquire(bytes, /*pinned=*/false);
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    r.taken[b.data] = Taken{&context, b, nullptr, false};
  }
  return OwnedBuffer(b.data, bytes, give_back_device_output);
}

void device_output_consumed_on(void* output, Stream consumer) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  auto it = r.taken.find(output);
  if (it == r.taken.end()) return;
  it->second.consumer = consumer;
  it->second.handed = true;
}

void give_back_device_output(void* output) {
  Taken t;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    auto it = r.taken.find(output);
    if (it == r.taken.end()) return;
    t = it->second;
    r.taken.erase(it);
    ++r.given_back;
  }
  const CudaRuntime* cuda = cuda_runtime();
  if (!cuda) return;
  // Note [device outputs back to the pool]. A failure here (a broken device) leaves the
  // buffer out of the pool rather than reusable too early.
  try {
    Event after = t.context->new_event();
    DeviceGuard on(*cuda, t.context->device());
    const Stream stream = t.handed ? t.consumer : t.context->stream();
    if (cuda->EventRecord(after, stream) != kSuccess) {
      cuda->EventDestroy(after);
      return;
    }
    t.context->release(t.buffer, after);
  } catch (const std::exception&) {
  }
}

DeviceOutputCounts device_output_counts() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lk(r.mu);
  return DeviceOutputCounts{r.taken.size(), r.given_back};
}

}  // namespace device
}  // namespace hvdlite
