// The ranks of one host (more than two) AND their negotiation words through memory all of
// them map, instead of an MPI_Iallreduce: a round costs a copy in, a flag, and reading the
// others' packets, where the library's collective costs several message latencies.
//
// A flag-per-rank board: each rank owns a mailbox, a round counter (on its own cache line)
// and two packet buffers used alternately. Round k writes buffer k % 2, then publishes k;
// once every rank has published k, each rank ANDs the N packets itself (AND is exact in any
// order: every rank gets the same words). Two buffers suffice: a rank starts round k + 1
// only after seeing every rank's round k, which each published after reading all packets of
// round k - 1, the buffers round k + 1 reuses. (Two ranks swap instead: shm_swap.h.)
//
// A round may gather instead (start_gather): no AND, each rank reads every rank's packet
// where it lies (packet()), which stays put until this rank starts its next round (a peer
// overwrites the buffer of round k only in round k + 2, after this rank published k + 1).
// The negotiation reduces small all-reduces riding in the round this way (controller.h).
//
// Every rank must start the same rounds with the same word counts (negotiation keeps them
// in step). Not thread-safe: one thread at a time per rank.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace hvdlite {

class ShmBoard {
 public:
  // Bytes of memory `ranks` ranks of `capacity_words` words per packet share.
  static size_t segment_bytes(int ranks, size_t capacity_words);
  // `segment`: segment_bytes(ranks, capacity_words) bytes every rank maps, zeroed before any
  // rank starts a round; `rank`: this rank's index, 0 to ranks - 1.
  ShmBoard(void* segment, int ranks, size_t capacity_words, int rank);

  size_t capacity_words() const { return capacity_; }
  // Publishes `words` (count <= capacity_words()) as this rank's next packet; when test()
  // first returns true they hold the AND of every rank's packet. They stay alive until then.
  void start_and(uint64_t* words, size_t count);
  // True once the round started last is complete (every rank published it) and ANDed.
  bool test();
  // Publishes `words` (count <= capacity_words()) as this rank's next packet, without
  // reducing: once test() returns true, packet(r) reads rank r's (this rank's included)
  // until this rank starts its next round. `words` may die at once (it is copied).
  void start_gather(const uint64_t* words, size_t count);
  const uint64_t* packet(int rank) const { return buffer(rank, round_); }

 private:
  std::atomic<uint64_t>* round_of(int rank) const;
  const uint64_t* buffer(int rank, uint64_t round) const;

  char* base_;
  int ranks_;
  size_t capacity_;
  int rank_;
  uint64_t round_ = 0;  // rounds this rank started
  uint64_t* words_ = nullptr;
  size_t count_ = 0;
  int lagging_ = 0;  // the rank found behind last, polled first
  bool waiting_ = false;
  bool gathering_ = false;  // the round started last is a gather: test() ANDs nothing
};

}  // namespace hvdlite
