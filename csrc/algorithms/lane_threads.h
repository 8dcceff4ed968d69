// Threads kept between calls for the lanes of large shared-memory all-reduces (Note [lanes]
// in shm_lanes.h). Threads started for every call cost the pipelined staging, which reduces
// a 64 MiB batch as sixteen 4 MiB calls, 13-14% of its time on the 16-core GPU host (CPU 7.9
// ms in pieces against 6.8 in one call); kept threads sleep between calls and wake on a
// condition variable. Owned by whoever runs the
// all-reduces (the engine's AllreduceExecutor); one call at a time.
//
// Note [idle lanes]
// Lanes make a large all-reduce faster only where cores are free. Where the framework computes
// while the all-reduce runs (backward, with gradients reduced as they come), a lane takes a
// core from it: on the 16-core host, 8 ranks x 2 lanes reduced 64 MiB 1.5-2.0x faster than
// one lane, yet made the torch MLP step about a tenth slower. Priority::Idle runs the kept
// threads at the scheduler's idle priority (SCHED_IDLE): they get a core only when no other
// thread wants it, so an exposed all-reduce (the framework waiting) has every free core, and
// one that overlaps computation costs it nothing. The calling thread (lane 0) keeps its
// priority; once its own lane is done it waits by sleeping (the transport's wait policy),
// which frees its core for a starved lane, so the all-reduce takes at worst about one lane's
// time. Where the scheduler refuses the policy, the threads keep the normal one.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hvdlite {

class LaneThreads {
 public:
  enum class Priority { Normal, Idle };
  explicit LaneThreads(Priority priority = Priority::Normal) : priority_(priority) {}
  LaneThreads(const LaneThreads&) = delete;
  LaneThreads& operator=(const LaneThreads&) = delete;
  ~LaneThreads();

  // Runs task(k) for k = 1..count, each on a thread of its own, and returns at once; the
  // threads are (re)made when count changes. The previous call's tasks must have returned.
  // `all_done` (if any) runs on the last task's thread once done() is true, to wake a waiter.
  void start(int count, std::function<void(int)> task, std::function<void()> all_done = nullptr);
  // True once every task of the last start() has returned.
  bool done() const { return running_.load(std::memory_order_acquire) == 0; }
  // Waits (yielding) until done() and the last task's `all_done` has returned: after it,
  // nothing of the call runs any more.
  void finish() const;

 private:
  void stop();

  const Priority priority_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable wake_;
  std::function<void(int)> task_;  // guarded by mu_
  std::function<void()> all_done_;  // guarded by mu_
  uint64_t generation_ = 0;        // guarded by mu_: start() calls so far
  bool stopping_ = false;          // guarded by mu_
  std::atomic<int> running_{0};
  std::atomic<bool> settled_{true};  // done(), and all_done (if any) has returned
};

}  // namespace hvdlite
