// When a wait gives up: at a fixed time, or a span after the moment the time is first asked
// for. A small collective's wait usually ends within the first round its caller runs, before
// anything asks, and then reads no clock: a read costs about 25 ns of a call of 1.5 us.
// Single-threaded: one waiting thread asks (Group::help, the controller's round, the handle
// table), so the first answer is fixed without a lock.
#pragma once

#include <chrono>

namespace hvdlite {

class Deadline {
 public:
  using clock = std::chrono::steady_clock;

  static Deadline at(clock::time_point t) { return Deadline(t, clock::duration::zero(), true); }
  static Deadline never() { return at(clock::time_point::max()); }
  static Deadline after(clock::duration span) { return Deadline(clock::time_point(), span, false); }

  // The time, fixed at the first call (now + span for a span).
  clock::time_point when() const {
    if (!fixed_) {
      at_ = clock::now() + span_;
      fixed_ = true;
    }
    return at_;
  }
  bool is_never() const { return fixed_ && at_ == clock::time_point::max(); }

 private:
  Deadline(clock::time_point at, clock::duration span, bool fixed) : at_(at), span_(span), fixed_(fixed) {}
  mutable clock::time_point at_;
  clock::duration span_;
  mutable bool fixed_;
};

}  // namespace hvdlite
