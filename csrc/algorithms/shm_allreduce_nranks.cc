#include "algorithms/shm_allreduce_nranks.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "algorithms/reduce.h"

namespace hvdlite {
namespace {

// Note [the board]
// The area starts with three counters per rank, each on a cache line of its own and written
// by that rank only: `staged` (rounds whose pieces it has staged, ever), `reduced` (rounds
// whose own piece it has reduced into its result slot) and `done` (rounds it has finished
// reading: its reduce read the others' stage slots, its copy-out their result slots). After
// them, per rank, kSlots stage slots (one piece per segment) and kSlots result slots (one
// piece). Round q (counted over every collective this area ever ran) uses slot q % kSlots.
//
// Round q: a rank writes its stage slot once every rank is done with round q - kSlots, then
// publishes staged = q + 1 (release); the owner of segment g reduces once every other rank
// published staged >= q + 1 (acquire), then publishes reduced = q + 1; the others copy its
// result out once they see that, then publish done = q + 1. The stage slot's piece of segment
// g is read by g's owner only, and the owner folds it outside the area (Note [folding in
// cache]), so ranks never write what another rank still reads.
//
// The counters never go back and every rank runs the same collectives with the same element
// counts (negotiation keeps them in step), so all ranks agree on every round's number
// without a per-call handshake; a rank may start the next collective while the others still
// copy out the last one, at most kSlots rounds ahead of the slowest.
//
// Note [no deadlock, a lost peer]
// A rank's loop does whichever of its three tasks (stage, reduce, copy out) can progress;
// each waits only on other ranks' earlier tasks, so the rank furthest behind can always
// progress. A poll that finds nothing to do goes through Transport::waiting_for_peer() (spin,
// yield, then make sure the peers are alive), as shm_allreduce.cc's queues do.
constexpr size_t kLine = 64;
constexpr uint64_t kSlots = 2;
// Pieces of at most 64 KiB (shm_allreduce.cc measured 16-128 KiB alike at 2 ranks); at many
// ranks the area makes them smaller, down to 4 KiB.
constexpr size_t kMaxPieceBytes = size_t(64) << 10;
constexpr size_t kMinPieceBytes = size_t(4) << 10;
// Note [folding in cache]
// The owner folds its peers' staged pieces in blocks small enough for L1: each block of the
// next peer's piece is copied into one of two local buffers and the running result folded
// into it (dst = received (op) acc, the ring's operand positions), so the owner only reads
// the stage slots, which stay in the cache of the rank that wrote them, and writes lines of
// its own. (Folding in place into the peers' slots moved every written line between cores
// twice: to the owner, and back when the peer staged its next round.)
constexpr size_t kFoldBlockBytes = 4096;
enum Counter { kStaged = 0, kReduced = 1, kDone = 2 };

size_t header_bytes(int ranks) { return 3 * static_cast<size_t>(ranks) * kLine; }

class Board {
 public:
  Board(const Transport::SharedArea& area, int ranks)
      : base_(static_cast<char*>(area.data)),
        ranks_(ranks),
        piece_(shm_allreduce_nranks_piece_bytes(area.bytes, ranks)),
        per_rank_(kSlots * (static_cast<size_t>(ranks) + 1) * piece_) {
    static_assert(std::atomic<uint64_t>::is_always_lock_free, "the counters are shared across processes");
  }
  size_t piece_bytes() const { return piece_; }
  std::atomic<uint64_t>& counter(int rank, Counter c) const {
    return *reinterpret_cast<std::atomic<uint64_t>*>(base_ + (static_cast<size_t>(rank) * 3 + c) * kLine);
  }
  // Rank `rank`'s staged piece of segment `segment` in round `round`.
  char* stage(int rank, uint64_t round, int segment) const {
    return region(rank) + ((round % kSlots) * ranks_ + static_cast<size_t>(segment)) * piece_;
  }
  // Rank `rank`'s reduced piece of its own segment in round `round`.
  char* result(int rank, uint64_t round) const {
    return region(rank) + (kSlots * ranks_ + round % kSlots) * piece_;
  }
  // True when every rank but `me` has counted `c` up to `value`. `lagging` remembers the
  // last rank found behind, where the next poll starts.
  bool others_reached(Counter c, uint64_t value, int me, int& lagging) const {
    const int n = static_cast<int>(ranks_);
    for (int k = 0; k < n; ++k) {
      const int p = (lagging + k) % n;
      if (p == me) continue;
      if (counter(p, c).load(std::memory_order_acquire) < value) {
        lagging = p;
        return false;
      }
    }
    return true;
  }

 private:
  char* region(int rank) const { return base_ + header_bytes(ranks_) + static_cast<size_t>(rank) * per_rank_; }
  char* base_;
  size_t ranks_;
  size_t piece_;
  size_t per_rank_;
};

}  // namespace

size_t shm_allreduce_nranks_piece_bytes(size_t area_bytes, int ranks) {
  if (ranks < 2 || area_bytes <= header_bytes(ranks)) return 0;
  const size_t n = static_cast<size_t>(ranks);
  size_t piece = (area_bytes - header_bytes(ranks)) / (n * kSlots * (n + 1)) / kLine * kLine;
  piece = std::min(piece, kMaxPieceBytes);
  return piece < kMinPieceBytes ? 0 : piece;
}

bool shm_allreduce_nranks_available(Transport& t) {
  const Transport::SharedArea area = t.shared_area();
  return area.data != nullptr && shm_allreduce_nranks_piece_bytes(area.bytes, t.size()) != 0;
}

// Folds the others' staged copies of this rank's piece (count elements from element
// `begin` of segment me, staged in round q) into `buf`, in the ring's order and operand
// positions (Note [folding in cache]), and scales the result.
void reduce_own_piece(const Board& board, uint64_t q, int n, int me, const SpanBuffer& buf,
                      size_t begin, size_t count, DataType dtype, ReduceOp op, double postscale) {
  const size_t es = buf.elem_size();
  alignas(kLine) char folded[2][kFoldBlockBytes];
  const size_t block = kFoldBlockBytes / es;
  for (size_t at = 0; at < count; at += block) {
    const size_t c = std::min(block, count - at);
    const char* acc = board.stage((me + 1) % n, q, me) + at * es;
    for (int k = 2; k < n; ++k) {
      char* next = folded[k % 2];
      std::memcpy(next, board.stage((me + k) % n, q, me) + at * es, c * es);
      reduce_into(next, acc, c, dtype, op);
      acc = next;
    }
    buf.for_each_run(begin + at, c, [&](char* p, size_t run) {
      reduce_into(p, acc, run, dtype, op);
      if (postscale != 1.0) copy_scaled(p, p, run, dtype, postscale);
      acc += run * es;
    });
  }
}

void run_rounds(const ShmPort& t, const SpanBuffer& buf, const Segments& segs, DataType dtype,
                ReduceOp op, double postscale, Halves halves) {
  if (buf.count() == 0) return;
  const int n = t.size, me = t.rank;
  const size_t es = buf.elem_size();
  const Board board(t.area, n);
  const size_t per_piece = board.piece_bytes() / es;
  const uint64_t rounds = (segs.max_count() + per_piece - 1) / per_piece;
  // Piece i of segment g: elements [segs.offset[g] + i * per_piece, + piece_count(g, i)).
  auto piece_count = [&](int g, uint64_t i) -> size_t {
    const size_t at = i * per_piece;
    return at >= segs.count[g] ? 0 : std::min(per_piece, segs.count[g] - at);
  };
  auto piece_begin = [&](int g, uint64_t i) { return segs.offset[g] + i * per_piece; };

  // Rounds before this collective: this rank's own counters all stand there (it finished the
  // last collective), and only it writes them.
  const uint64_t base = board.counter(me, kStaged).load(std::memory_order_relaxed);
  uint64_t staged = 0, reduced = 0, placed = 0;  // rounds of this collective, per task
  int lagging = (me + 1) % n;
  uint64_t idle_polls = 0;
  while (placed < rounds) {
    bool progressed = false;
    // 1. Stage this rank's pieces of the others' segments, once every rank is done with the
    //    round that last used the slot.
    const uint64_t q_stage = base + staged;
    if (staged < rounds &&
        (q_stage < kSlots || board.others_reached(kDone, q_stage - kSlots + 1, me, lagging)) &&
        (staged - placed) < kSlots) {
      for (int g = 0; g < n && halves.scatter; ++g) {
        if (g == me) continue;
        char* out = board.stage(me, q_stage, g);
        buf.for_each_run(piece_begin(g, staged), piece_count(g, staged), [&](char* p, size_t c) {
          std::memcpy(out, p, c * es);
          out += c * es;
        });
      }
      board.counter(me, kStaged).store(q_stage + 1, std::memory_order_release);
      ++staged;
      progressed = true;
    }
    // 2. Reduce this rank's piece from the others' staged copies, in the ring's order; put
    //    the result in the result slot.
    const uint64_t q_reduce = base + reduced;
    if (reduced < staged && (!halves.scatter || board.others_reached(kStaged, q_reduce + 1, me, lagging))) {
      const size_t count = piece_count(me, reduced);
      if (count > 0 && halves.scatter) {
        reduce_own_piece(board, q_reduce, n, me, buf, piece_begin(me, reduced), count, dtype, op, postscale);
      }
      if (count > 0 && halves.gather) {
        char* out = board.result(me, q_reduce);
        buf.for_each_run(piece_begin(me, reduced), count, [&](char* p, size_t c) {
          std::memcpy(out, p, c * es);
          out += c * es;
        });
      }
      board.counter(me, kReduced).store(q_reduce + 1, std::memory_order_release);
      ++reduced;
      progressed = true;
    }
    // 3. Copy the others' reduced pieces into place.
    const uint64_t q_place = base + placed;
    if (placed < reduced && (!halves.gather || board.others_reached(kReduced, q_place + 1, me, lagging))) {
      for (int g = 0; g < n && halves.gather; ++g) {
        if (g == me) continue;
        const char* in = board.result(g, q_place);
        buf.for_each_run(piece_begin(g, placed), piece_count(g, placed), [&](char* p, size_t c) {
          std::memcpy(p, in, c * es);
          in += c * es;
        });
      }
      board.counter(me, kDone).store(q_place + 1, std::memory_order_release);
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
  // As the ring counts its exchange with the others: the reduce-scatter hands them this
  // rank's pieces of their segments and takes their pieces of its own; the all-gather hands
  // its segment to each of them and takes theirs.
  const uint64_t total = buf.count() * es, own = segs.count[me] * es, others = total - own;
  const uint64_t to_each = static_cast<uint64_t>(n - 1) * own;
  t.stats->bytes_sent += (halves.scatter ? others : 0) + (halves.gather ? to_each : 0);
  t.stats->bytes_received += (halves.scatter ? to_each : 0) + (halves.gather ? others : 0);
  // Copies to and from the area: staged (others), result (own), copied out (others).
  t.stats->shared_memory_copied_bytes += (halves.scatter ? others : 0) + (halves.gather ? total : 0);
  t.stats->shared_memory_rounds += rounds;
  if (halves.scatter && halves.gather) t.stats->shared_memory_allreduces += 1;
}

void shm_allreduce_nranks(Transport& t, const SpanBuffer& buf, DataType dtype, ReduceOp op,
                          double postscale) {
  run_rounds(ShmPort::of(t), buf, even_segments(buf.count(), t.size()), dtype, op, postscale, Halves{true, true});
}

void shm_reduce_scatter_nranks(Transport& t, const SpanBuffer& buf, DataType dtype, ReduceOp op,
                               double postscale) {
  run_rounds(ShmPort::of(t), buf, even_segments(buf.count(), t.size()), dtype, op, postscale, Halves{true, false});
}

void shm_allgather_nranks(Transport& t, const SpanBuffer& buf) {
  run_rounds(ShmPort::of(t), buf, even_segments(buf.count(), t.size()), DataType::UInt8, ReduceOp::Sum, 1.0,
             Halves{false, true});
}

}  // namespace hvdlite
