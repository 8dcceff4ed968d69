#include "engine/handle.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>

namespace hvdlite {

OwnedBuffer::OwnedBuffer(size_t n) : bytes(n) {
  // 64-byte alignment suits every dtype and vector loads; never a null pointer for n == 0.
  data = std::aligned_alloc(64, ((n + 63) / 64) * 64 + 64);
  if (!data) throw Error(Status::Internal, "out of memory allocating " + std::to_string(n) + " bytes");
}

OwnedBuffer& OwnedBuffer::operator=(OwnedBuffer&& o) noexcept {
  if (this != &o) {
    if (data) (free ? free : std::free)(data);
    data = o.data; bytes = o.bytes; free = o.free;
    o.data = nullptr; o.bytes = 0;
  }
  return *this;
}

OwnedBuffer::~OwnedBuffer() {
  if (data) (free ? free : std::free)(data);
}

int64_t HandleTable::create(int owner) {
  std::lock_guard<std::mutex> lk(mu_);
  int64_t h = next_++;
  activity_.progressed();
  Slot slot;
  slot.owner = owner;
  recycled_.insert(slots_, h, std::move(slot));  // Note [recycled map nodes]
  return h;
}

int HandleTable::owner(int64_t handle) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = slots_.find(handle);
  return it == slots_.end() ? -1 : it->second.owner;
}

void HandleTable::complete(int64_t handle, Outcome outcome) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = slots_.find(handle);
    if (it == slots_.end()) return;
    it->second.done = true;
    it->second.outcome = std::move(outcome);
    activity_.progressed();
    if (it->second.watched) finished_watched_.push_back(handle);
  }
  cv_.notify_all();
}

void HandleTable::watch(int64_t handle) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = slots_.find(handle);
    if (it != slots_.end() && !it->second.done) {
      it->second.watched = true;
      return;
    }
    finished_watched_.push_back(handle);
  }
  cv_.notify_all();
}

bool HandleTable::any_watched_finished() {
  std::lock_guard<std::mutex> lk(mu_);
  return !finished_watched_.empty();
}

std::optional<int64_t> HandleTable::next_watched(std::chrono::steady_clock::time_point until) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!cv_.wait_until(lk, until, [&] { return !finished_watched_.empty(); })) return std::nullopt;
  const int64_t handle = finished_watched_.front();
  finished_watched_.pop_front();
  return handle;
}

bool HandleTable::poll(int64_t handle) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = slots_.find(handle);
  if (it == slots_.end()) throw Error(Status::InvalidArgument, "unknown or already synchronized handle " + std::to_string(handle));
  return it->second.done;
}

Outcome HandleTable::wait(int64_t handle) {
  return *wait_until(handle, Deadline::never());
}

std::optional<Outcome> HandleTable::wait_until(int64_t handle, const Deadline& until) {
  std::unique_lock<std::mutex> lk(mu_);
  auto it = slots_.find(handle);
  if (it == slots_.end()) throw Error(Status::InvalidArgument, "unknown or already synchronized handle " + std::to_string(handle));
  Slot& slot = it->second;  // references survive rehashing; iterators do not
  // Small collectives finish within microseconds: look again briefly before sleeping, which
  // saves a futex sleep and wake-up on both threads.
  if (!slot.done) {  // most often done already (its waiter ran the round): no clock read
    const auto end = until.when();
    const auto spin_until = std::min(end, std::chrono::steady_clock::now() + std::chrono::microseconds(50));
    while (!slot.done && std::chrono::steady_clock::now() < spin_until) {
      lk.unlock();
      std::this_thread::yield();
      lk.lock();
    }
    if (until.is_never()) {
      cv_.wait(lk, [&] { return slot.done; });
    } else if (!cv_.wait_until(lk, end, [&] { return slot.done; })) {
      return std::nullopt;
    }
  }
  Outcome out = std::move(slot.outcome);
  recycled_.erase(slots_, slots_.find(handle));  // `it` may be stale: the lock was let go
  return out;
}

}  // namespace hvdlite
