// A request as this rank holds it while it waits for negotiation: the Request that is sent
// to the coordinator plus the local buffers and the handle to complete.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/message.h"

namespace hvdlite {

// The device side of an entry whose tensor lives on a GPU (device/staging.h, Note [device
// staging]): its data is staged in host memory, which the engine reads and writes as any
// other. The engine never sees a CUDA type; it only calls these two.
class DeviceWork {
 public:
  virtual ~DeviceWork() = default;
  // Before the engine first reads the entry's host data: waits for the staging copy.
  virtual void before_read() = 0;
  // When the entry completes (ok: successfully), before its handle does: the last entry of
  // a submission issues the copies back to the device.
  virtual void after(bool ok) = 0;

  // Pipelined staging (Note [pipelined staging] in device/staging.h): a large staging lands
  // in pieces, and the engine may read it piece by piece instead of after before_read().
  virtual bool piecewise() const { return false; }
  // Before the engine reads host bytes [data, data + bytes) of the entry: they have landed.
  virtual void wait_landed(const void* data, size_t bytes) { (void)data; (void)bytes; before_read(); }
  // Those bytes hold their final results: they may go back to the device now.
  virtual void results_ready(const void* data, size_t bytes) { (void)data; (void)bytes; }
};

struct TensorEntry {
  // Where the entry stands in negotiation.
  enum class State {
    New,          // just dequeued; the controller decides how to announce it
    CacheHit,     // announced through its bit in the cached fast path
    Unannounced,  // must go to the coordinator at the next gather
    Announced,    // the coordinator has seen it; resent at every gather until ready
  };

  Request request;
  const void* input = nullptr;  // caller's buffers (kept alive by the Python layer)
  void* output = nullptr;
  // Allgather / reducescatter: whether the caller gave `output`, of `output_bytes` bytes; the
  // result lands there when it is exactly that size (Note [outputs the caller gives]).
  bool output_given = false;
  size_t output_bytes = 0;
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank
  std::shared_ptr<DeviceWork> device;  // a GPU tensor's staging; shared by its submission
  int input_device = -1, output_device = -1;  // CUDA device ids of the caller's arrays, -1: host
  int64_t handle = 0;
  State state = State::New;
  int cache_id = -1;
  bool done = false;  // completed this round; removed from the pending list after it
  std::chrono::steady_clock::time_point enqueued = std::chrono::steady_clock::now();
  // Stamped only while the timeline is on (timeline.h).
  struct Trace {
    std::chrono::steady_clock::time_point drained, decided;
    bool phases_written = false;  // an executor already traced its execution phases
  } trace;

  size_t bytes() const { return num_elements(request.shape) * dtype_size(request.dtype); }
};

using EntryList = std::vector<std::unique_ptr<TensorEntry>>;

}  // namespace hvdlite
