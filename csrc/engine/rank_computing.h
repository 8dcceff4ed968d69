// Whether this process computes outside hvdlite: the deadlock detectors' test of "blocked".
//
// Note [computing ranks]
// A rank whose thread waits on a collective may still be computing in another thread (a main
// thread that submits what its peers wait for only after a long step, while a metrics or data
// thread already waits): that rank is not blocked, and neither deadlock detector may count it
// so. Which threads compute cannot be told from who submitted: autograd's worker threads
// submit gradients during backward and then sit idle, while the main thread waits in the
// optimizer's synchronize. What tells is CPU time: a thread that computes uses it, an idle or
// waiting one does not. So a rank computes when the process's CPU time outside hvdlite's own
// threads grew, over the last sampling window, by more than kIdleShare of one core's time.
//   hvdlite's threads, by identity (a Scope on the thread), not by guess: the groups' loop
//   threads, the shared-memory lanes, the timeline writer, the NCCL watchdog and hvdlite's
//   Python threads (the completion thread, c10d's completers) for their whole life; and any
//   thread for as long as it waits in hvdlite (a collective's wait, which may run negotiation
//   rounds and poll; a point-to-point wait, which polls). Their polling, however busy on a
//   loaded machine, is never taken for computing.
//   The process's time is CLOCK_PROCESS_CPUTIME_ID (every thread, those that ended too); each
//   hvdlite thread's is its own CPU clock (pthread_getcpuclockid), read at each sample. A
//   thread's time between two samples is hvdlite's when it was in a Scope at either of them;
//   a thread leaving for good adds its last part itself. So a thread that stays in its wait
//   is never counted as computing, and one that computes between two waits is (briefly).
//   The window is a quarter of HVDLITE_DEADLOCK_TIME_SECONDS (50 ms to 1 s): a rank whose
//   computing ends is found blocked within two windows, so a true deadlock is still named
//   within 1.5 times the grace, and the cost is a few clock reads per window, never per
//   request (a Scope costs two plain stores; a thread's first Scope enlists it once).
// What this does not see: a thread that sleeps (time.sleep), waits on a lock, a queue or I/O
// outside hvdlite uses no CPU time, so it is not computing; nor is a frozen process. And a
// thread that spins outside hvdlite (a busy loop polling a Work's is_completed()) computes, so
// a rank with one never trips the detectors.
#pragma once

namespace hvdlite {

// Share of one core's time (over the window) that the process may use outside hvdlite's
// threads and still count as not computing: interpreters' and libraries' idle housekeeping.
constexpr double kIdleShare = 0.05;

class HvdliteThread {
 public:
  // While a Scope lives on a thread, that thread's CPU time is hvdlite's (nestable).
  class Scope {
   public:
    Scope() : thread_(enter()) {}
    ~Scope() { leave(thread_); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    void* thread_;  // the thread's record: one thread-local lookup per Scope, not two
  };
  // The calling thread is hvdlite's until it ends (hvdlite's Python threads).
  static void mark_for_life() { enter(); }

 private:
  static void* enter();  // returns the calling thread's record, for leave()
  static void leave(void* thread);
};

// Whether the process's threads outside hvdlite used more than kIdleShare of a core over the
// last window (grace_s / 4, 50 ms to 1 s; grace_s: HVDLITE_DEADLOCK_TIME_SECONDS). Sampled
// when the last sample is a window old, else the last answer. The first call, with no window
// seen yet, answers false: wrong for one window at most, too short to make a grace period (the
// next window's answer ends the detectors' streak), while true would delay every deadlock by
// a window. Thread-safe.
bool rank_computing(double grace_s);

}  // namespace hvdlite
