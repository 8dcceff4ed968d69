#include "device/staging.h"

#include <algorithm>

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
                             std::vector<Tensor> tensors, size_t piece_bytes)
    : cuda_(cuda), context_(DeviceContext::get(cuda, device)), tensors_(std::move(tensors)),
      remaining_(tensors_.size()) {
  for (const Tensor& t : tensors_) {
    offsets_.push_back(total_);
    total_ += aligned(t.bytes);
    any_output_ = any_output_ || t.output;
  }
  // Pieces of host_ (Note [pipelined staging]); the last may be shorter.
  const size_t step = piece_bytes != 0 && total_ >= 2 * piece_bytes ? piece_bytes : total_;
  for (size_t begin = 0; begin < total_; begin += step) {
    Piece p;
    p.begin = begin;
    p.end = std::min(total_, begin + step);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      const size_t lo = std::max(p.begin, offsets_[i]), hi = std::min(p.end, offsets_[i] + tensors_[i].bytes);
      if (lo < hi) p.needed += hi - lo;
    }
    pieces_.push_back(p);
  }
  DeviceGuard on(cuda_, device);
  const Stream ours = context_.stream();
  done_ = context_.new_event();
  if (piecewise()) uploaded_ = context_.new_event();
  wait_for_producer(cuda_, context_, producer);
  host_ = context_.acquire(total_, true);
  const char* source = nullptr;  // what the pieces copy to the host: fused_, or the lone tensor
  size_t source_bytes = total_;
  if (tensors_.size() > 1) {
    fused_ = context_.acquire(total_, false);
    char* fused = static_cast<char*>(fused_.data);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      check(cuda_.MemcpyAsync(fused + offsets_[i], tensors_[i].input, tensors_[i].bytes,
                              kind(CopyKind::DeviceToDevice), ours),
            "cudaMemcpyAsync (into the device fusion buffer)");
    }
    source = fused;
  } else if (!tensors_.empty()) {
    source = static_cast<const char*>(tensors_[0].input);
    source_bytes = tensors_[0].bytes;
  }
  for (Piece& p : pieces_) {
    const size_t end = std::min(p.end, source_bytes);
    if (source && p.begin < end) {
      check(cuda_.MemcpyAsync(static_cast<char*>(host_.data) + p.begin, source + p.begin, end - p.begin,
                              kind(CopyKind::DeviceToHost), ours),
            fused_.data ? "cudaMemcpyAsync (device fusion buffer to pinned host memory)"
                        : "cudaMemcpyAsync (device tensor to pinned host memory)");
    }
    p.landed = context_.new_event();
    check(cuda_.EventRecord(p.landed, ours), "cudaEventRecord (staged)");
  }
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
  for (Piece& p : pieces_) {
    if (p.landed) cuda_.EventDestroy(p.landed);
  }
  if (done_) cuda_.EventDestroy(done_);
  if (uploaded_) cuda_.EventDestroy(uploaded_);
}

void DeviceStaging::wait_piece(Piece& p) {
  if (p.waited) return;
  check(cuda_.EventSynchronize(p.landed), "cudaEventSynchronize (device to host staging copy)");
  p.waited = true;
}

void DeviceStaging::before_read() {
  std::lock_guard<std::mutex> lk(pieces_mu_);
  for (Piece& p : pieces_) wait_piece(p);
}

std::pair<size_t, size_t> DeviceStaging::host_range(const void* data, size_t bytes) const {
  const char* base = static_cast<const char*>(host_.data);
  const char* at = static_cast<const char*>(data);
  if (at < base || at + bytes > base + total_) {
    throw Error(Status::Internal, "pipelined staging: host bytes outside the staging buffer");
  }
  return {static_cast<size_t>(at - base), static_cast<size_t>(at - base) + bytes};
}

void DeviceStaging::wait_landed(const void* data, size_t bytes) {
  const auto [lo, hi] = host_range(data, bytes);
  std::lock_guard<std::mutex> lk(pieces_mu_);
  for (Piece& p : pieces_) {
    if (p.begin < hi && lo < p.end) wait_piece(p);
  }
}

void DeviceStaging::upload(Piece& p, Stream on) {
  p.uploaded = true;
  if (!any_output_) return;
  const char* from = static_cast<const char*>(host_.data) + p.begin;
  if (fused_.data) {
    check(cuda_.MemcpyAsync(static_cast<char*>(fused_.data) + p.begin, from, p.end - p.begin,
                            kind(CopyKind::HostToDevice), on),
          "cudaMemcpyAsync (results to the device fusion buffer)");
  } else {
    const size_t end = std::min(p.end, tensors_[0].bytes);
    if (p.begin >= end) return;
    check(cuda_.MemcpyAsync(static_cast<char*>(tensors_[0].output) + p.begin, from, end - p.begin,
                            kind(CopyKind::HostToDevice), on),
          "cudaMemcpyAsync (result to the device)");
  }
}

void DeviceStaging::results_ready(const void* data, size_t bytes) {
  const auto [lo, hi] = host_range(data, bytes);
  std::lock_guard<std::mutex> lk(pieces_mu_);
  for (Piece& p : pieces_) {
    const size_t a = std::max(lo, p.begin), b = std::min(hi, p.end);
    if (a >= b) continue;
    p.ready += b - a;
    if (p.ready >= p.needed && !p.uploaded && ok_) {
      DeviceGuard on(cuda_, context_.device());
      upload(p, context_.upload_stream());
    }
  }
}

void DeviceStaging::after(bool ok) {
  ok_ = ok_ && ok;
  if (remaining_.fetch_sub(1) != 1) return;
  before_read();  // an entry that failed before it was read: its copies must not outlive it
  DeviceGuard on(cuda_, context_.device());
  const Stream ours = context_.stream();
  if (ok_ && piecewise()) {
    // The pieces not copied back yet, then one stream again (Note [pipelined staging]).
    const Stream up = context_.upload_stream();
    {
      std::lock_guard<std::mutex> lk(pieces_mu_);
      for (Piece& p : pieces_) {
        if (!p.uploaded) upload(p, up);
      }
    }
    check(cuda_.EventRecord(uploaded_, up), "cudaEventRecord (results copied back)");
    check(cuda_.StreamWaitEvent(ours, uploaded_, 0), "cudaStreamWaitEvent (hvdlite's stream on its copies back)");
  } else if (ok_ && any_output_) {
    if (fused_.data) {
      check(cuda_.MemcpyAsync(fused_.data, host_.data, total_, kind(CopyKind::HostToDevice), ours),
            "cudaMemcpyAsync (results to the device fusion buffer)");
    } else {
      check(cuda_.MemcpyAsync(tensors_[0].output, host_.data, tensors_[0].bytes,
                              kind(CopyKind::HostToDevice), ours),
            "cudaMemcpyAsync (result to the device)");
    }
  }
  if (ok_ && fused_.data) {
    char* fused = static_cast<char*>(fused_.data);
    for (size_t i = 0; i < tensors_.size(); ++i) {
      if (!tensors_[i].output) continue;
      check(cuda_.MemcpyAsync(tensors_[i].output, fused + offsets_[i], tensors_[i].bytes,
                              kind(CopyKind::DeviceToDevice), ours),
            "cudaMemcpyAsync (out of the device fusion buffer)");
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
