// Two ranks on one host swap their negotiation packets (control words, and at 2 ranks the
// small all-reduces riding with them: controller.h) through memory both map, instead of
// through MPI messages: a swap then costs a copy in, a flag and a copy out, where an MPI
// message pair costs a message latency of the library's shared-memory transport on top.
//
// Each side owns a mailbox: a round counter (on its own cache line) and two packet buffers
// used alternately. Round k writes buffer k % 2, then publishes k; the peer copies it out
// once it sees k. Two buffers suffice: a side starts round k + 1 only after seeing the
// peer's round k, which the peer published after copying out this side's round k - 1, the
// buffer round k + 1 reuses.
//
// Both sides must start the same rounds with the same word counts (negotiation keeps them
// in step). Not thread-safe: one thread at a time per side (the group's driver token).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace hvdlite {

class ShmSwap {
 public:
  // Bytes of memory two sides of `capacity_words` words per packet share.
  static size_t segment_bytes(size_t capacity_words);
  // `segment`: segment_bytes(capacity_words) bytes both sides map, zeroed before either
  // side starts a round; `side`: 0 or 1.
  ShmSwap(void* segment, size_t capacity_words, int side);

  size_t capacity_words() const { return capacity_; }
  // Publishes `send` (count <= capacity_words()) as this side's next packet; `recv` (count
  // words) receives the peer's when test() first returns true. Both stay alive until then.
  void start(const uint64_t* send, uint64_t* recv, size_t count);
  // True once the peer's packet of the round started last is in `recv`.
  bool test();

 private:
  std::atomic<uint64_t>* round_of(int side) const;
  uint64_t* buffer(int side, uint64_t round) const;

  char* base_;
  size_t capacity_;
  int side_;
  uint64_t round_ = 0;  // rounds this side started
  uint64_t* recv_ = nullptr;
  size_t count_ = 0;
  bool waiting_ = false;
};

// POSIX shared memory mapped into this process; unmapped when destroyed. The name is only
// for the other side to open it: unlink() it once both have, so nothing outlives the job.
class SharedSegment {
 public:
  // A new segment of `bytes` zeroed bytes, or null (no shared memory, no room, name taken).
  static std::unique_ptr<SharedSegment> create(const std::string& name, size_t bytes);
  // The segment another process created, or null.
  static std::unique_ptr<SharedSegment> open(const std::string& name, size_t bytes);
  static void unlink(const std::string& name);
  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  void* data() const { return data_; }

 private:
  SharedSegment(void* data, size_t bytes) : data_(data), bytes_(bytes) {}
  void* data_;
  size_t bytes_;
};

}  // namespace hvdlite
