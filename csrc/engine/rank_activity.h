// What this rank is doing, over all its groups, for the cross-set deadlock watch
// (cross_set_deadlock.h): whether a thread waits on a request, whether a collective runs, and
// a counter that moves whenever anything happens (a request submitted, run or completed). A
// rank is stuck while a thread waits, nothing runs, the counter stands still and the process
// does not compute elsewhere (the watch asks rank_computing.h). Kept by the handle table,
// through which every request of every group is made and completed.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace hvdlite {

class RankActivity {
 public:
  void begin_wait() { ++waits_; }
  void end_wait() { --waits_; }
  void progressed() { ++progress_; }
  // Around a group's execution of a round's responses: a collective may take long (a large
  // all-reduce over a slow network) while every thread of every rank waits for it.
  class Executing {
   public:
    explicit Executing(RankActivity& a) : a_(a) { ++a_.executing_, ++a_.progress_; }
    ~Executing() { --a_.executing_, ++a_.progress_; }
    Executing(const Executing&) = delete;
    Executing& operator=(const Executing&) = delete;

   private:
    RankActivity& a_;
  };

  bool stuck() const { return waits_.load() > 0 && executing_.load() == 0; }
  uint64_t progress() const { return progress_.load(); }

  // The message of a cross-set deadlock every rank agreed on: once set, every request a
  // group fails because a peer stopped fails with Status::Deadlock and this message.
  void set_deadlock(const std::string& message) {
    std::lock_guard<std::mutex> lk(mu_);
    if (!deadlock_) deadlock_ = message;
  }
  std::optional<std::string> deadlock() const {
    std::lock_guard<std::mutex> lk(mu_);
    return deadlock_;
  }

 private:
  std::atomic<int> waits_{0};
  std::atomic<int> executing_{0};
  std::atomic<uint64_t> progress_{0};
  mutable std::mutex mu_;
  std::optional<std::string> deadlock_;  // guarded by mu_
};

}  // namespace hvdlite
