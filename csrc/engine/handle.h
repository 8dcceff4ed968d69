// Completion state per request, shared between the framework threads that wait and the
// background thread that completes: is_completed (poll), wait, and the error if any.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <optional>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/deadline.h"
#include "engine/rank_activity.h"
#include "engine/recycled_nodes.h"
#include "hvdlite.h"

namespace hvdlite {

// A buffer the core allocated for an op whose output size only negotiation knows: host
// memory, or (with a `free` of the device code's) device memory the engine never touches.
struct OwnedBuffer {
  using Free = void (*)(void*);
  void* data = nullptr;
  size_t bytes = 0;
  Free free = nullptr;  // null: std::free
  OwnedBuffer() = default;
  explicit OwnedBuffer(size_t n);
  OwnedBuffer(void* adopted, size_t n, Free how) : data(adopted), bytes(n), free(how) {}
  OwnedBuffer(OwnedBuffer&& o) noexcept : data(o.data), bytes(o.bytes), free(o.free) { o.data = nullptr; o.bytes = 0; }
  OwnedBuffer& operator=(OwnedBuffer&& o) noexcept;
  ~OwnedBuffer();
  void* release() { void* d = data; data = nullptr; bytes = 0; return d; }
};

struct Outcome {
  Status status = Status::Success;
  std::string error;
  OwnedBuffer output;                  // allgather / alltoall / reducescatter
  std::vector<int64_t> output_shape;
  DataType output_dtype = DataType::Float32;
  int output_device = -1;                // the CUDA device `output` lives on; -1: host memory
  std::vector<int64_t> received_splits;  // alltoall
  int last_joined_rank = -1;             // join
  int process_set_id = -1;               // add_process_set: the new set's id
  // The process set whose group completed the request, and the negotiation round of the
  // last failure all its members agreed on before then (an error response, a deadlock; -1:
  // none yet). Python numbers the set's unnamed calls afresh from there (Note [unnamed
  // names after a failure] in src/hvdlite/policy/names.py).
  int agreed_set = -1;
  int64_t agreed_round = -1;
};

class HandleTable {
 public:
  // owner: the process set whose group completes the handle (Engine::wait lets the caller
  // drive that group's rounds).
  int64_t create(int owner = 0);
  // The owner given to create(), or -1 for an unknown or already waited-for handle.
  int owner(int64_t handle);
  void complete(int64_t handle, Outcome outcome);
  bool poll(int64_t handle);
  // Blocks until done, then removes the handle and returns its outcome.
  Outcome wait(int64_t handle);
  // wait() until `until`; nothing (and the handle stays) when it is not done by then.
  std::optional<Outcome> wait_until(int64_t handle, const Deadline& until);
  std::optional<Outcome> wait_until(int64_t handle, std::chrono::steady_clock::time_point until) {
    return wait_until(handle, Deadline::at(until));
  }

  // Note [watched handles]
  // A thread that completes futures (the c10d backend's) waits for whichever of its requests
  // finishes first, rather than for one request after another: it wakes once per finished
  // request and never when one is submitted. watch() adds a handle (a finished or unknown one,
  // e.g. already waited for, counts as finished at once); next_watched() returns each watched
  // handle once after it finished, in the order they finished, or nothing by `until`. The
  // outcome stays for wait(), which then returns at once.
  void watch(int64_t handle);
  std::optional<int64_t> next_watched(std::chrono::steady_clock::time_point until);
  bool any_watched_finished();

  // Every request of every group is made and completed here: what the rank is doing.
  RankActivity& activity() { return activity_; }

 private:
  struct Slot { bool done = false; bool watched = false; int owner = 0; Outcome outcome; };
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t next_ = 1;
  std::unordered_map<int64_t, Slot> slots_;
  RecycledNodes<std::unordered_map<int64_t, Slot>> recycled_;  // guarded by mu_
  std::deque<int64_t> finished_watched_;  // guarded by mu_
  RankActivity activity_;
};

}  // namespace hvdlite
