#include "device/staging.h"

namespace hvdlite {
namespace device {
namespace {

constexpr size_t kAlign = 256;  // each tensor's offset in the fusion buffers

size_t aligned(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

int kind(CopyKind k) { return static_cast<int>(k); }

}  // namespace

// Makes hvdlite's stream wait for the work queued so far on the caller's.
static void wait_for_producer(const CudaRuntime& cuda, DeviceContext& context, Stream producer) {
  Event produced = context.new_event();
  check(cuda.EventRecord(produced, producer), "cudaEventRecord (on the caller's stream)");
  check(cuda.StreamWaitEvent(context.stream(), produced, 0),
        "cudaStreamWaitEvent (hvdlite's stream on the caller's)");
  cuda.EventDestroy(produced);  // released once it completes; the wait is already queued
}

DeviceOrder::DeviceOrder(const CudaRuntime& cuda, int device, Stream producer, size_t entries)
    : cuda_(cuda), context_(DeviceContext::get(cuda, device)), remaining_(entries) {
  DeviceGuard on(cuda_, device);
  done_ = context_.new_event();
  wait_for_producer(cuda_, context_, producer);
}

DeviceOrder::~DeviceOrder() {
  if (done_) cuda_.EventDestroy(done_);
}

void DeviceOrder::after(bool ok) {
  if (remaining_.fetch_sub(1) != 1) return;
  DeviceGuard on(cuda_, context_.device());
  check(cuda_.EventRecord(done_, context_.stream()), "cudaEventRecord (results on the device)");
  done_recorded_ = true;
}

void DeviceOrder::consumer_wait(Stream consumer) {
  if (!done_recorded_) return;
  DeviceGuard on(cuda_, context_.device());
  check(cuda_.StreamWaitEvent(consumer, done_, 0), "cudaStreamWaitEvent (the caller's stream on hvdlite's results)");
}

void DeviceOrder::host_wait() {
  if (done_recorded_) check(cuda_.EventSynchronize(done_), "cudaEventSynchronize (results on the device)");
}

DeviceStaging::DeviceStaging(const CudaRuntime& cuda, int device, Stream producer,
                             std::vector<Tensor> tensors)
    : cuda_(cuda), context_(DeviceContext::get(cuda, device)), tensors_(std::move(tensors)),
      remaining_(tensors_.size()) {
  for (const Tensor& t : tensors_) {
    offsets_.push_back(total_);
    total_ += aligned(t.bytes);
  }
  DeviceGuard on(cuda_, device);
  const Stream ours = context_.stream();
  staged_ = context_.new_event();
  done_ = context_.new_event();
  wait_for_producer(cuda_, context_, producer);
  host_ = context_.acquire(total_, true);
  if (tensors_.size() > 1) {
    fused_ = context_.acquire(total_, false);
    char* fused = static_cast<char*>(fused_.data);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      check(cuda_.MemcpyAsync(fused + offsets_[i], tensors_[i].input, tensors_[i].bytes,
                              kind(CopyKind::DeviceToDevice), ours),
            "cudaMemcpyAsync (into the device fusion buffer)");
    }
    check(cuda_.MemcpyAsync(host_.data, fused, total_, kind(CopyKind::DeviceToHost), ours),
          "cudaMemcpyAsync (device fusion buffer to pinned host memory)");
  } else if (!tensors_.empty()) {
    check(cuda_.MemcpyAsync(host_.data, tensors_[0].input, tensors_[0].bytes,
                            kind(CopyKind::DeviceToHost), ours),
          "cudaMemcpyAsync (device tensor to pinned host memory)");
  }
  check(cuda_.EventRecord(staged_, ours), "cudaEventRecord (staged)");
}

DeviceStaging::~DeviceStaging() {
  // Every copy reading or writing the buffers is on hvdlite's stream, before this event.
  auto release = [&](DeviceContext::Buffer& b) {
    if (!b.data) return;
    Event after = nullptr;
    try {
      after = context_.new_event();
      if (cuda_.EventRecord(after, context_.stream()) != kSuccess) {
        cuda_.StreamSynchronize(context_.stream());
      }
    } catch (const Error&) {
      cuda_.StreamSynchronize(context_.stream());
    }
    context_.release(b, after);
  };
  release(host_);
  release(fused_);
  if (staged_) cuda_.EventDestroy(staged_);
  if (done_) cuda_.EventDestroy(done_);
}

void DeviceStaging::before_read() {
  if (read_.exchange(true)) return;
  check(cuda_.EventSynchronize(staged_), "cudaEventSynchronize (device to host staging copy)");
}

void DeviceStaging::after(bool ok) {
  ok_ = ok_ && ok;
  if (remaining_.fetch_sub(1) != 1) return;
  DeviceGuard on(cuda_, context_.device());
  const Stream ours = context_.stream();
  if (ok_) {
    if (!fused_.data) {
      if (tensors_[0].output) {
        check(cuda_.MemcpyAsync(tensors_[0].output, host_.data, tensors_[0].bytes,
                                kind(CopyKind::HostToDevice), ours),
              "cudaMemcpyAsync (result to the device)");
      }
    } else {
      bool any_output = false;
      for (const Tensor& t : tensors_) any_output = any_output || t.output;
      char* fused = static_cast<char*>(fused_.data);
      if (any_output) {
        check(cuda_.MemcpyAsync(fused, host_.data, total_, kind(CopyKind::HostToDevice), ours),
              "cudaMemcpyAsync (results to the device fusion buffer)");
      }
      for (size_t i = 0; i < tensors_.size(); ++i) {
        if (!tensors_[i].output) continue;
        check(cuda_.MemcpyAsync(tensors_[i].output, fused + offsets_[i], tensors_[i].bytes,
                                kind(CopyKind::DeviceToDevice), ours),
              "cudaMemcpyAsync (out of the device fusion buffer)");
      }
    }
  }
  check(cuda_.EventRecord(done_, ours), "cudaEventRecord (results on the device)");
  done_recorded_ = true;
}

void DeviceStaging::consumer_wait(Stream consumer) {
  if (!done_recorded_) return;  // failed before any result was copied: nothing to wait for
  DeviceGuard on(cuda_, context_.device());
  check(cuda_.StreamWaitEvent(consumer, done_, 0), "cudaStreamWaitEvent (the caller's stream on hvdlite's results)");
}

void DeviceStaging::host_wait() {
  if (!done_recorded_) return;
  check(cuda_.EventSynchronize(done_), "cudaEventSynchronize (results on the device)");
}

}  // namespace device
}  // namespace hvdlite
