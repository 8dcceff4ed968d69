// A doorbell in memory that the ranks of one host share: a rank that waits long on its peers
// sleeps in the kernel until a peer rings, instead of yielding the core in a loop.
//
// Note [doorbell]
// On a host with more busy threads than cores (a training step's compute threads beside the
// engine's), a waiter that yields in a loop still takes turns on a core that its own or its
// peer's compute needs, and every hand-off between two ranks then waits until both happen to
// be scheduled at once. On the 2-core development machine, DDP's first gradient bucket of the
// 2-rank MLP (4 MiB, sent while backward goes on) took 12 ms instead of 0.3. A waiter asleep
// takes no turn, and the kernel runs it soon after it is woken.
//
// The doorbell is two words, each on a cache line of its own: `rings` and `sleepers`. Every
// store a peer may be waiting for is followed by ring(): a full fence, a load of `sleepers`,
// and only where it is nonzero, rings += 1 and a futex wake of every sleeper. A waiter that
// has waited long enlists (sleepers += 1, then reads `rings`), looks at what it waits for
// once more (the caller's next poll), and only then sleeps on `rings` while it still holds the
// value read. A ring after that read changed the word, so the kernel does not let it sleep; a
// store whose ring saw no sleeper came before the enlisting in the one order of sequentially
// consistent operations, so the look after enlisting sees it (Dekker's pattern). Sleeps are
// bounded, so the liveness check and the stall inspector still run while a wait lasts.
//
// ring() is safe from any thread (lane threads ring too); enlist/sleep/leave belong to the
// one thread that waits for this transport at a time (the group's driver).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace hvdlite {

class ShmDoorbell {
 public:
  // Bytes of shared memory the doorbell takes (zeroed before any rank uses it).
  static constexpr size_t kBytes = 128;
  explicit ShmDoorbell(void* memory);

  // After a store a peer may wait for: wakes the sleepers, if any (a fence and a load else).
  void ring();

  // The waiter's side. enlist() registers this waiter as a sleeper; the caller then looks
  // again before it calls sleep(), which returns at a ring or after `longest`. leave() ends
  // the registration (the wait is over, or it made progress).
  void enlist();
  void sleep(std::chrono::microseconds longest);
  void leave();
  bool enlisted() const { return enlisted_; }

 private:
  std::atomic<uint32_t>* rings_;
  std::atomic<uint32_t>* sleepers_;
  bool enlisted_ = false;
  uint32_t seen_ = 0;  // rings_ when this waiter last looked
};

}  // namespace hvdlite
