// The doorbell (transport/shm_doorbell.h): two sides as threads play ping-pong through one
// word each, sleeping on the doorbell while they wait, over plain memory and over a POSIX
// segment mapped twice, as two processes map it. A lost wake-up would leave a side asleep
// for the whole bound of its sleep; the test counts such sleeps and wants none.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <chrono>
#include <string>
#include <vector>

#include "transport/shm_doorbell.h"
#include "transport/shm_swap.h"
#include "harness.h"
#include "loopback.h"

namespace hvdlite {
namespace {

using testing::run_ranks;

// Side s waits until the peer's word reaches k, then sets its own to k + 1 and rings: every
// hand-off puts one side to sleep (it enlists after a few idle looks) and wakes it by a ring.
void ping_pong(void* mem0, void* mem1, int rounds) {
  constexpr auto kBound = std::chrono::seconds(5);  // far beyond any wake-up
  std::atomic<int> overslept{0};
  run_ranks(2, [&](int side) {
    char* base = static_cast<char*>(side == 0 ? mem0 : mem1);
    ShmDoorbell bell(base);
    auto* words = reinterpret_cast<std::atomic<uint64_t>*>(base + ShmDoorbell::kBytes);
    std::atomic<uint64_t>& mine = words[side * 8];  // a cache line each
    std::atomic<uint64_t>& theirs = words[(1 - side) * 8];
    for (uint64_t k = 0; k < static_cast<uint64_t>(rounds); ++k) {
      const uint64_t wanted = side == 0 ? k : k + 1;  // side 0 serves first
      int idle = 0;
      while (theirs.load(std::memory_order_acquire) < wanted) {
        if (++idle < 4) continue;     // a few looks, then enlist; sleep after the next look
        const auto before = std::chrono::steady_clock::now();
        bell.sleep(std::chrono::duration_cast<std::chrono::microseconds>(kBound));
        if (std::chrono::steady_clock::now() - before >= kBound - std::chrono::milliseconds(500)) {
          overslept.fetch_add(1);
        }
      }
      bell.leave();
      mine.store(k + 1, std::memory_order_release);
      bell.ring();
    }
  });
  CHECK_EQ(overslept.load(), 0);
  // The sides did sleep: a ring counts only while someone is enlisted.
  const uint32_t rings = reinterpret_cast<std::atomic<uint32_t>*>(mem0)->load();
  std::printf("  %d hand-offs, %u rings to sleepers\n", 2 * rounds, rings);
  CHECK(rings > 0);
}

TEST(shm_doorbell_wakes_every_sleeper) {
  std::vector<uint64_t> mem((ShmDoorbell::kBytes + 256) / sizeof(uint64_t) + 8, 0);
  void* base = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(mem.data()) + 63) / 64 * 64);
  ping_pong(base, base, 3000);
}

TEST(shm_doorbell_works_across_two_mappings_of_a_segment) {
  const size_t bytes = 4096;
  const std::string name = "/hvdlite-test-doorbell." + std::to_string(getpid());
  std::unique_ptr<SharedSegment> a = SharedSegment::create(name, bytes);
  CHECK(a != nullptr);
  std::unique_ptr<SharedSegment> b = SharedSegment::open(name, bytes);
  SharedSegment::unlink(name);
  CHECK(b != nullptr);
  ping_pong(a->data(), b->data(), 1000);
}

TEST(shm_doorbell_ring_without_sleepers_changes_nothing) {
  std::vector<uint64_t> mem(ShmDoorbell::kBytes / sizeof(uint64_t) + 8, 0);
  void* base = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(mem.data()) + 63) / 64 * 64);
  ShmDoorbell bell(base);
  bell.ring();
  CHECK_EQ(reinterpret_cast<std::atomic<uint32_t>*>(base)->load(), 0u);  // rings: only for sleepers
  bell.enlist();
  bell.ring();
  CHECK_EQ(reinterpret_cast<std::atomic<uint32_t>*>(base)->load(), 1u);
  bell.sleep(std::chrono::microseconds(1000000));  // rung since it enlisted: returns at once
  bell.leave();
}

}  // namespace
}  // namespace hvdlite
