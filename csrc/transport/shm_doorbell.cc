#include "transport/shm_doorbell.h"

#include <climits>
#include <ctime>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#else
#include <thread>
#endif

namespace hvdlite {
namespace {

constexpr size_t kLine = 64;

#if defined(__linux__)
// Not FUTEX_PRIVATE_FLAG: the word lives in memory other processes map.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::microseconds longest) {
  timespec timeout{static_cast<time_t>(longest.count() / 1000000),
                   static_cast<long>(longest.count() % 1000000) * 1000};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &timeout, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}
#else
// Without futexes a sleep is a yield, and a ring has no one to wake.
void futex_wait(std::atomic<uint32_t>*, uint32_t, std::chrono::microseconds) { std::this_thread::yield(); }
void futex_wake_all(std::atomic<uint32_t>*) {}
#endif

}  // namespace

ShmDoorbell::ShmDoorbell(void* memory)
    : rings_(reinterpret_cast<std::atomic<uint32_t>*>(static_cast<char*>(memory))),
      sleepers_(reinterpret_cast<std::atomic<uint32_t>*>(static_cast<char*>(memory) + kLine)) {
  static_assert(std::atomic<uint32_t>::is_always_lock_free, "the words are shared across processes");
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t), "a futex is a plain 32-bit word");
}

void ShmDoorbell::ring() {
  // The store just made must be ordered before the look at the sleepers (Note [doorbell]).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (sleepers_->load(std::memory_order_seq_cst) == 0) return;
  rings_->fetch_add(1, std::memory_order_seq_cst);
  futex_wake_all(rings_);
}

void ShmDoorbell::enlist() {
  if (enlisted_) return;
  sleepers_->fetch_add(1, std::memory_order_seq_cst);
  seen_ = rings_->load(std::memory_order_seq_cst);
  enlisted_ = true;
}

void ShmDoorbell::sleep(std::chrono::microseconds longest) {
  if (!enlisted_) {
    enlist();  // the caller looks again first
    return;
  }
  futex_wait(rings_, seen_, longest);
  seen_ = rings_->load(std::memory_order_seq_cst);
}

void ShmDoorbell::leave() {
  if (!enlisted_) return;
  sleepers_->fetch_sub(1, std::memory_order_seq_cst);
  enlisted_ = false;
}

}  // namespace hvdlite
