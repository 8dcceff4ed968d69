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
//
// Note [pipelined staging]
// A staging of at least twice HVDLITE_PIPELINE_PIECE_BYTES is copied to the host in pieces,
// each followed by an event (landed). At 2 ranks the engine reduces such a batch piece by
// piece too (fusion.cc; its pieces need not match these): before it reads host bytes it
// waits for the landed events that cover them (wait_landed), and once bytes are final it
// reports them (results_ready). A piece of ours whose tensor bytes are all final is copied
// back at once, on the context's upload stream, so that on the GPU the copy to the host of
// a later piece, the host reduction of another and the copy back of an earlier one overlap.
// Ordering:
//   - the upload of a piece is issued by the host after the host saw that piece's landed
//     event complete and the reduction of its bytes return, so it cannot overtake either;
//   - it writes only that piece's range (of the output, or of the device fusion buffer),
//     which no pending copy to the host reads any more;
//   - after(), when every entry has completed, issues the pieces not yet copied back, records
//     an event on the upload stream and makes hvdlite's stream wait on it before the copies
//     out of the fusion buffer and the final event: consumers and buffer pools see one stream.
// The bytes are those of one piece: every element is reduced exactly as before.
// If the reduction fails midway, pieces already copied back hold results (as the host
// buffers do); the submission fails on every rank either way.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
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
  // `piece_bytes`: copies in pieces of this size when the staging holds at least two (0: one).
  DeviceStaging(const CudaRuntime& cuda, int device, Stream producer, std::vector<Tensor> tensors,
                size_t piece_bytes = 0);
  ~DeviceStaging() override;

  // Where tensor i's data lives on the host while the engine works on it.
  void* host(size_t i) const { return static_cast<char*>(host_.data) + offsets_[i]; }

  void before_read() override;
  void after(bool ok) override;
  bool piecewise() const override { return pieces_.size() > 1; }
  void wait_landed(const void* data, size_t bytes) override;
  void results_ready(const void* data, size_t bytes) override;

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
  // A range of the host (and device fusion) buffer, copied to the host and back as a unit.
  struct Piece {
    size_t begin, end;   // bytes of host_
    size_t needed = 0;   // of them, tensor bytes (not alignment padding)
    size_t ready = 0;    // of those, final (results_ready)
    Event landed = nullptr;
    bool waited = false, uploaded = false;
  };
  // Byte range [begin, end) of host_ that [data, data + bytes) covers.
  std::pair<size_t, size_t> host_range(const void* data, size_t bytes) const;
  void wait_piece(Piece& p);
  void upload(Piece& p, Stream on);  // the piece's results back to the device

  DeviceContext::Buffer host_, fused_;  // fused_: only with several device tensors
  Event done_ = nullptr, uploaded_ = nullptr;  // uploaded_: piecewise only
  std::vector<Piece> pieces_;  // one, unless the staging is pipelined
  std::mutex pieces_mu_;
  bool any_output_ = false;
  std::atomic<size_t> remaining_;
  bool ok_ = true;  // the driver thread only
  std::atomic<bool> done_recorded_{false};
};

}  // namespace device
}  // namespace hvdlite
