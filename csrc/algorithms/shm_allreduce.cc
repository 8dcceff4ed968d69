#include "algorithms/shm_allreduce.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "algorithms/reduce.h"
#include "algorithms/shm_allreduce_nranks.h"
#include "algorithms/shm_lanes.h"

namespace hvdlite {
namespace {

// Note [shared-memory queues]
// The area holds four single-producer, single-consumer queues of pieces: for each side s, a
// raw queue (s sends pieces of the peer's half, unreduced) and a reduced queue (s sends
// pieces of its own half, reduced). Each queue has `slots` slots of kPieceBytes (as many as
// the area holds) and two counters, each on a cache line of its own and written by one side
// only: `published` (pieces the producer has written, ever) and `consumed` (pieces the
// consumer is done with, ever). Piece k of a queue lives in slot k % slots. The producer
// writes a slot only while published - consumed < slots, then publishes with a release
// store; the consumer reads only while consumed < published (acquire), and releases the
// slot by storing consumed + 1 after its last read of it.
//
// The counters never go back: collectives follow one another in the queues, and both sides
// agree on every collective's pieces because both run the same collectives in the same order
// with the same element count (negotiation keeps them in step; the algorithm is chosen from
// sizes every rank knows). No per-call handshake is needed: a side may start the next
// collective while the peer still copies out the last one; the counters keep them apart.
//
// Note [no deadlock]
// A side's loop does whichever of its three tasks can progress: send a raw piece (needs a
// free raw slot), reduce a raw piece of the peer's (needs that piece, and a free reduced slot
// for the result), copy out a reduced piece of the peer's (needs that piece). Slots are
// freed by the consumer's reduce and copy-out, and a copy-out waits on nothing but its piece,
// so as long as both sides run their loops, every queue drains: neither side waits for the
// other to wait. A reduced piece of the peer's covers the same elements as the raw piece it
// answers, which this side sent earlier, so overwriting them cannot lose data still to send.
// The negotiation's swap uses other memory (shm_swap.h), so a side still in its round does
// not hold up the data of the other.
//
// Note [a lost peer]
// Shared memory never reports a dead peer. Every poll that finds nothing to do goes through
// Transport::waiting_for_peer(), the same policy as the swap's: spin briefly, yield the core,
// and after a while make sure the peer is alive (MPI fails a receive from a lost peer: with
// ULFM the engine's recovery takes over, without it MPI ends the job). An error leaves the
// queues out of step, but a lost peer means a new transport (and a new area) anyway; nothing
// else in here can fail (no allocation, no message).
constexpr size_t kLine = 64;
// Pieces of 16, 32, 64 and 128 KiB ran alike at 256 KiB-4 MiB on the 2-core development
// machine (docs/benchmarks.md); the area (2 MiB) then holds 7 slots per queue.
constexpr size_t kPieceBytes = size_t(64) << 10;
constexpr int kRaw = 0, kReduced = 1;
constexpr size_t kHeaderBytes = 8 * kLine;  // 2 sides x 2 queues x 2 counters

size_t slots_in(size_t area_bytes) {
  return area_bytes < kHeaderBytes ? 0 : (area_bytes - kHeaderBytes) / (4 * kPieceBytes);
}

class Queues {
 public:
  explicit Queues(const Transport::SharedArea& area)
      : base_(static_cast<char*>(area.data)), slots_(slots_in(area.bytes)) {
    static_assert(std::atomic<uint64_t>::is_always_lock_free, "the counters are shared across processes");
  }
  size_t slots() const { return slots_; }

  // The counters of the queue `kind` sent by `sender`.
  std::atomic<uint64_t>& published(int sender, int kind) const { return counter(sender, kind, 0); }
  std::atomic<uint64_t>& consumed(int sender, int kind) const { return counter(sender, kind, 1); }
  char* slot(int sender, int kind, uint64_t piece) const {
    const size_t queue = static_cast<size_t>(sender) * 2 + static_cast<size_t>(kind);
    return base_ + kHeaderBytes + (queue * slots_ + piece % slots_) * kPieceBytes;
  }

 private:
  std::atomic<uint64_t>& counter(int sender, int kind, int which) const {
    const size_t line = (static_cast<size_t>(sender) * 2 + static_cast<size_t>(kind)) * 2 + which;
    return *reinterpret_cast<std::atomic<uint64_t>*>(base_ + line * kLine);
  }
  char* base_;
  size_t slots_;
};

// One half of the buffer cut into pieces: piece i is elements [begin(i), begin(i) + size(i)).
struct Pieces {
  size_t offset, count, per_piece;
  uint64_t number() const { return (count + per_piece - 1) / per_piece; }
  size_t begin(uint64_t i) const { return offset + i * per_piece; }
  size_t size(uint64_t i) const { return std::min(per_piece, count - i * per_piece); }
};

}  // namespace

bool shm_allreduce_available(Transport& t) {
  if (t.size() != 2) return t.size() > 2 && shm_allreduce_nranks_available(t);
  return t.shared_area().data != nullptr && slots_in(t.shared_area().bytes) >= 2;
}

void shm_allreduce(Transport& t, const SpanBuffer& buf, DataType dtype, ReduceOp op,
                   double postscale, LaneThreads* threads) {
  if (shm_runs_in_lanes(t, buf.count() * buf.elem_size())) {
    if (threads) return shm_allreduce_in_lanes(t, buf, dtype, op, postscale, *threads);
    LaneThreads for_this_call;
    return shm_allreduce_in_lanes(t, buf, dtype, op, postscale, for_this_call);
  }
  if (t.size() != 2) return shm_allreduce_nranks(t, buf, dtype, op, postscale);
  shm_two_ranks(ShmPort::of(t), buf, even_segments(buf.count(), 2), dtype, op, postscale, Halves{true, true});
}

void shm_two_ranks(const ShmPort& t, const SpanBuffer& buf, const Segments& segs, DataType dtype,
                   ReduceOp op, double postscale, Halves halves, const ShmReduce* reduce) {
  if (buf.count() == 0) return;
  const int me = t.rank, peer = 1 - me;
  const size_t es = buf.elem_size();
  const Queues q(t.area);
  const size_t per_piece = kPieceBytes / es;
  const Pieces mine{segs.offset[me], segs.count[me], per_piece};
  const Pieces theirs{segs.offset[peer], segs.count[peer], per_piece};
  // Pieces each task handles in this collective. The reduce-scatter half sends the peer's
  // segment raw and reduces this side's; the all-gather half sends this side's segment
  // (reduced, or as it is) and copies the peer's into place.
  const uint64_t to_stage = halves.scatter ? theirs.number() : 0;
  const uint64_t to_reduce = mine.number();
  const uint64_t to_place = halves.gather ? theirs.number() : 0;

  // This side's counters: only it writes them, so it keeps their values.
  uint64_t raw_sent = q.published(me, kRaw).load(std::memory_order_relaxed);
  uint64_t reduced_sent = q.published(me, kReduced).load(std::memory_order_relaxed);
  uint64_t raw_taken = q.consumed(me, kRaw).load(std::memory_order_relaxed);
  uint64_t reduced_taken = q.consumed(me, kReduced).load(std::memory_order_relaxed);
  uint64_t staged = 0, reduced = 0, placed = 0;
  const size_t slots = q.slots();
  uint64_t idle_polls = 0;
  while (staged < to_stage || reduced < to_reduce || placed < to_place) {
    bool progressed = false;
    // 1. A raw piece of the peer's segment, for the peer to reduce.
    if (staged < to_stage &&
        raw_sent - q.consumed(peer, kRaw).load(std::memory_order_acquire) < slots) {
      char* out = q.slot(me, kRaw, raw_sent);
      buf.for_each_run(theirs.begin(staged), theirs.size(staged), [&](char* p, size_t c) {
        std::memcpy(out, p, c * es);
        out += c * es;
      });
      q.published(me, kRaw).store(++raw_sent, std::memory_order_release);
      ++staged;
      progressed = true;
    }
    // 2. A piece of this side's segment: reduce the peer's raw piece into it and scale it
    //    (reduce-scatter half), then send it to the peer (all-gather half).
    if (reduced < to_reduce &&
        (!halves.scatter || q.published(peer, kRaw).load(std::memory_order_acquire) > raw_taken) &&
        (!halves.gather || reduced_sent - q.consumed(peer, kReduced).load(std::memory_order_acquire) < slots)) {
      const char* in = halves.scatter ? q.slot(peer, kRaw, raw_taken) : nullptr;
      char* out = halves.gather ? q.slot(me, kReduced, reduced_sent) : nullptr;
      size_t at = mine.begin(reduced);
      buf.for_each_run(at, mine.size(reduced), [&](char* p, size_t c) {
        if (in) {
          if (reduce) {
            (*reduce)(p, in, at, c);
          } else {
            reduce_into(p, in, c, dtype, op);
            if (postscale != 1.0) copy_scaled(p, p, c, dtype, postscale);
          }
          in += c * es;
          at += c;
        }
        if (out) {
          std::memcpy(out, p, c * es);
          out += c * es;
        }
      });
      if (halves.scatter) q.consumed(me, kRaw).store(++raw_taken, std::memory_order_release);
      if (halves.gather) q.published(me, kReduced).store(++reduced_sent, std::memory_order_release);
      ++reduced;
      progressed = true;
    }
    // 3. A piece of the peer's segment, reduced by the peer: copy it into place.
    if (placed < to_place &&
        q.published(peer, kReduced).load(std::memory_order_acquire) > reduced_taken) {
      const char* in = q.slot(peer, kReduced, reduced_taken);
      buf.for_each_run(theirs.begin(placed), theirs.size(placed), [&](char* p, size_t c) {
        std::memcpy(p, in, c * es);
        in += c * es;
      });
      q.consumed(me, kReduced).store(++reduced_taken, std::memory_order_release);
      ++placed;
      progressed = true;
    }
    if (progressed) {
      idle_polls = 0;
      t.ring_peers();
    } else {
      t.waiting_for_peer(++idle_polls);
    }
  }
  t.peer_waited();
  // What this rank handed to and took from its peer, as the ring counts it: the reduce-scatter
  // half sends the peer's segment and takes this side's, the all-gather half the reverse.
  const uint64_t own = mine.count * es, other = theirs.count * es;
  t.stats->bytes_sent += (halves.scatter ? other : 0) + (halves.gather ? own : 0);
  t.stats->bytes_received += (halves.scatter ? own : 0) + (halves.gather ? other : 0);
  // Copies to and from the area: the peer's segment raw, this side's sent, the peer's copied
  // out (shm_allreduce_nranks.cc counts alike).
  t.stats->shared_memory_copied_bytes +=
      (halves.scatter ? other : 0) + (halves.gather ? own + other : 0);
  t.stats->shared_memory_rounds += std::max(mine.number(), theirs.number());
  if (halves.scatter && halves.gather) t.stats->shared_memory_allreduces += 1;
}

}  // namespace hvdlite
