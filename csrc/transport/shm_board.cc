#include "transport/shm_board.h"

#include <cstring>

namespace hvdlite {
namespace {

constexpr size_t kLine = 64;  // a cache line: the round counters never share one with data

size_t buffer_bytes(size_t capacity_words) {
  return (capacity_words * sizeof(uint64_t) + kLine - 1) / kLine * kLine;
}

}  // namespace

// Layout: one counter line per rank, then each rank's two buffers, rank-major.
size_t ShmBoard::segment_bytes(int ranks, size_t capacity_words) {
  return static_cast<size_t>(ranks) * (kLine + 2 * buffer_bytes(capacity_words));
}

ShmBoard::ShmBoard(void* segment, int ranks, size_t capacity_words, int rank)
    : base_(static_cast<char*>(segment)), ranks_(ranks), capacity_(capacity_words), rank_(rank),
      lagging_((rank + 1) % ranks) {
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "the counters are shared across processes");
}

std::atomic<uint64_t>* ShmBoard::round_of(int rank) const {
  return reinterpret_cast<std::atomic<uint64_t>*>(base_ + static_cast<size_t>(rank) * kLine);
}

const uint64_t* ShmBoard::buffer(int rank, uint64_t round) const {
  const size_t index = static_cast<size_t>(rank) * 2 + static_cast<size_t>(round % 2);
  return reinterpret_cast<const uint64_t*>(base_ + static_cast<size_t>(ranks_) * kLine +
                                           index * buffer_bytes(capacity_));
}

void ShmBoard::start_and(uint64_t* words, size_t count) {
  ++round_;
  std::memcpy(const_cast<uint64_t*>(buffer(rank_, round_)), words, count * sizeof(uint64_t));
  round_of(rank_)->store(round_, std::memory_order_release);
  words_ = words;
  count_ = count;
  waiting_ = true;
  gathering_ = false;
}

void ShmBoard::start_gather(const uint64_t* words, size_t count) {
  ++round_;
  std::memcpy(const_cast<uint64_t*>(buffer(rank_, round_)), words, count * sizeof(uint64_t));
  round_of(rank_)->store(round_, std::memory_order_release);
  words_ = nullptr;
  count_ = 0;
  waiting_ = true;
  gathering_ = true;
}

bool ShmBoard::test() {
  if (!waiting_) return true;
  for (int k = 0; k < ranks_; ++k) {
    const int p = (lagging_ + k) % ranks_;
    if (p != rank_ && round_of(p)->load(std::memory_order_acquire) < round_) {
      lagging_ = p;
      return false;
    }
  }
  for (int p = 0; p < ranks_ && !gathering_; ++p) {
    if (p == rank_) continue;
    const uint64_t* theirs = buffer(p, round_);
    for (size_t i = 0; i < count_; ++i) words_[i] &= theirs[i];
  }
  waiting_ = false;
  return true;
}

}  // namespace hvdlite
