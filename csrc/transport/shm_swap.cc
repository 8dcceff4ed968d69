#include "transport/shm_swap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace hvdlite {
namespace {

constexpr size_t kLine = 64;  // a cache line: the round counters never share one with data

size_t round_up(size_t n) { return (n + kLine - 1) / kLine * kLine; }

// Layout: [side 0's counter][side 1's counter] then the buffers, side-major.
size_t buffer_bytes(size_t capacity_words) { return round_up(capacity_words * sizeof(uint64_t)); }

}  // namespace

size_t ShmSwap::segment_bytes(size_t capacity_words) {
  return 2 * kLine + 4 * buffer_bytes(capacity_words);
}

ShmSwap::ShmSwap(void* segment, size_t capacity_words, int side)
    : base_(static_cast<char*>(segment)), capacity_(capacity_words), side_(side) {
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "the counters are shared across processes");
}

std::atomic<uint64_t>* ShmSwap::round_of(int side) const {
  return reinterpret_cast<std::atomic<uint64_t>*>(base_ + side * kLine);
}

uint64_t* ShmSwap::buffer(int side, uint64_t round) const {
  const size_t index = static_cast<size_t>(side) * 2 + static_cast<size_t>(round % 2);
  return reinterpret_cast<uint64_t*>(base_ + 2 * kLine + index * buffer_bytes(capacity_));
}

void ShmSwap::start(const uint64_t* send, uint64_t* recv, size_t count) {
  ++round_;
  std::memcpy(buffer(side_, round_), send, count * sizeof(uint64_t));
  round_of(side_)->store(round_, std::memory_order_release);
  recv_ = recv;
  count_ = count;
  waiting_ = true;
}

bool ShmSwap::test() {
  if (!waiting_) return true;
  if (round_of(1 - side_)->load(std::memory_order_acquire) < round_) return false;
  std::memcpy(recv_, buffer(1 - side_, round_), count_ * sizeof(uint64_t));
  waiting_ = false;
  return true;
}

std::unique_ptr<SharedSegment> SharedSegment::create(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return nullptr;
  // posix_fallocate, not ftruncate: a full /dev/shm must fail here, not raise SIGBUS later.
  void* p = MAP_FAILED;
  if (posix_fallocate(fd, 0, static_cast<off_t>(bytes)) == 0) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    return nullptr;
  }
  std::memset(p, 0, bytes);
  return std::unique_ptr<SharedSegment>(new SharedSegment(p, bytes));
}

std::unique_ptr<SharedSegment> SharedSegment::open(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) return nullptr;
  struct stat st;
  void* p = MAP_FAILED;
  if (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) >= bytes) {
    p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  close(fd);
  if (p == MAP_FAILED) return nullptr;
  return std::unique_ptr<SharedSegment>(new SharedSegment(p, bytes));
}

void SharedSegment::unlink(const std::string& name) { shm_unlink(name.c_str()); }

SharedSegment::~SharedSegment() { munmap(data_, bytes_); }

}  // namespace hvdlite
