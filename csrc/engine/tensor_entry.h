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
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank
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
