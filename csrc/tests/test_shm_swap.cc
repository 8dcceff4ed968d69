// The shared-memory swap of negotiation packets (transport/shm_swap.h): two sides as threads,
// over plain memory and over a POSIX segment mapped twice, as two processes map it.
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "transport/shm_swap.h"
#include "harness.h"
#include "loopback.h"

namespace hvdlite {
namespace {

using testing::run_ranks;

uint64_t word(int side, int round, size_t i) {
  return (static_cast<uint64_t>(side) << 60) ^ (static_cast<uint64_t>(round) << 24) ^ i;
}

// `rounds` swaps of varying lengths (up to the capacity); side 1 sometimes sleeps before a
// round, side 0 sometimes after, so either side runs ahead of the other by a round.
void swap_rounds(void* mem0, void* mem1, size_t capacity, int rounds) {
  run_ranks(2, [&](int side) {
    ShmSwap swap(side == 0 ? mem0 : mem1, capacity, side);
    CHECK_EQ(swap.capacity_words(), capacity);
    std::vector<uint64_t> send(capacity), recv(capacity);
    for (int k = 0; k < rounds; ++k) {
      const size_t count = 1 + (static_cast<size_t>(k) * 7919) % capacity;
      for (size_t i = 0; i < count; ++i) send[i] = word(side, k, i);
      if (side == 1 && k % 97 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      swap.start(send.data(), recv.data(), count);
      // The packet sent is the caller's to reuse at once: scribble on it.
      std::fill(send.begin(), send.begin() + count, ~uint64_t(0));
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!swap.test()) {
        CHECK(std::chrono::steady_clock::now() < give_up);
        std::this_thread::yield();
      }
      CHECK(swap.test());  // stays done until the next start
      for (size_t i = 0; i < count; ++i) CHECK_EQ(recv[i], word(1 - side, k, i));
      if (side == 0 && k % 89 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
}

TEST(shm_swap_exchanges_packets_in_step) {
  const size_t capacity = 300;
  std::vector<uint64_t> mem(ShmSwap::segment_bytes(capacity) / sizeof(uint64_t) + 8, 0);
  // 64-byte aligned, as a mapping is.
  void* base = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(mem.data()) + 63) / 64 * 64);
  swap_rounds(base, base, capacity, 2000);
}

TEST(shm_swap_works_across_two_mappings_of_a_segment) {
  const size_t capacity = 100;
  const size_t bytes = ShmSwap::segment_bytes(capacity);
  const std::string name = "/hvdlite-test-swap." + std::to_string(getpid());
  auto created = SharedSegment::create(name, bytes);
  CHECK(created != nullptr);
  CHECK(SharedSegment::create(name, bytes) == nullptr);  // the name is taken
  auto opened = SharedSegment::open(name, bytes);
  CHECK(opened != nullptr);
  CHECK(SharedSegment::open(name, bytes * 2) == nullptr);  // smaller than asked
  SharedSegment::unlink(name);
  CHECK(SharedSegment::open(name, bytes) == nullptr);  // unlinked: nobody else can open it
  CHECK(created->data() != opened->data());
  swap_rounds(created->data(), opened->data(), capacity, 500);
}

}  // namespace
}  // namespace hvdlite
