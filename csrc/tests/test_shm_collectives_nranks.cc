// All-gather, broadcast and reduce-scatter through shared memory for N ranks
// (shm_collectives_nranks.h), ranks as threads over plain memory at 2-8 ranks (2: the queues
// of shm_allreduce.h, more: the board): the same bytes
// as the transport's collectives and the ring's reduce-scatter (bit for bit), one after
// another and mixed with all-reduces through the same area while ranks run ahead, the
// counters, and a peer that never comes.
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "algorithms/collectives.h"
#include "algorithms/ring_allreduce.h"
#include "algorithms/shm_allreduce.h"
#include "algorithms/shm_allreduce_nranks.h"
#include "algorithms/shm_collectives_nranks.h"
#include "harness.h"
#include "loopback.h"

namespace hvdlite {
namespace {

using testing::Fabric;
using testing::run_ranks;

std::vector<uint8_t> bytes_of(int rank, size_t n, uint32_t seed) {
  std::mt19937 gen(seed * 7919 + static_cast<uint32_t>(rank));
  std::vector<uint8_t> out(n);
  for (auto& b : out) b = static_cast<uint8_t>(gen());
  return out;
}

std::string where(int ranks, int rank, int k) {
  return std::to_string(ranks) + " ranks, rank " + std::to_string(rank) + ", collective " + std::to_string(k);
}

TEST(shm_collectives_need_ranks_on_one_host_and_the_board_more_than_two) {
  Fabric two(2);
  run_ranks(2, [&](int r) {
    CHECK(shm_collectives_available(*two.world(r)));
    CHECK(!shm_collectives_nranks_available(*two.world(r)));
  });
  Fabric three(3);
  run_ranks(3, [&](int r) {
    CHECK(shm_collectives_available(*three.world(r)));
    CHECK(shm_collectives_nranks_available(*three.world(r)));
  });
  Fabric two_hosts(6, /*ranks_per_host=*/3);
  run_ranks(6, [&](int r) { CHECK(!shm_collectives_available(*two_hosts.world(r))); });
}

// All-gathers of uneven (and empty) contributions, broadcasts from each root, and all-reduces,
// one after another through one area; a rank sleeps now and then so the others run a
// collective ahead. Every result is checked against the bytes the ranks sent.
TEST(shm_allgather_and_broadcast_nranks_deliver_every_byte_while_ranks_run_ahead) {
  for (int ranks : {2, 3, 4, 8}) {
    Fabric fabric(ranks);
    const int collectives = 24;
    run_ranks(ranks, [&](int r) {
      auto t = fabric.world(r);
      for (int k = 0; k < collectives; ++k) {
        if (k % ranks == r) std::this_thread::sleep_for(std::chrono::milliseconds(2));
        const uint32_t seed = static_cast<uint32_t>(k);
        if (k % 3 == 0) {
          // Contributions of 0 to ~300 KB (several 64 KiB pieces), different per rank.
          std::vector<size_t> sizes(ranks);
          for (int p = 0; p < ranks; ++p) sizes[p] = ((p + k) % 4 == 0) ? 0 : (static_cast<size_t>(p + 1) * 37 * (k + 1) * (k + 1)) % 300001;
          size_t total = 0;
          for (size_t s : sizes) total += s;
          std::vector<uint8_t> mine = bytes_of(r, sizes[r], seed), out(total, 0xEE);
          shm_allgatherv_nranks(*t, mine.data(), out.data(), sizes);
          size_t at = 0;
          for (int p = 0; p < ranks; ++p) {
            if (std::memcmp(out.data() + at, bytes_of(p, sizes[p], seed).data(), sizes[p]) != 0) {
              throw testing::Failure("all-gather, " + where(ranks, r, k) + ": rank " + std::to_string(p) + "'s bytes wrong");
            }
            at += sizes[p];
          }
        } else if (k % 3 == 1) {
          const int root = k % ranks;
          const size_t n = (static_cast<size_t>(k) * 104729) % 400000;
          std::vector<uint8_t> buf = r == root ? bytes_of(root, n, seed) : std::vector<uint8_t>(n, 0);
          shm_broadcast_nranks(*t, buf.data(), n, root);
          if (buf != bytes_of(root, n, seed)) throw testing::Failure("broadcast, " + where(ranks, r, k));
        } else {
          const size_t count = 1 + (static_cast<size_t>(k) * 7001) % 100000;
          std::vector<float> d(count, static_cast<float>(r + 1));
          shm_allreduce(*t, SpanBuffer({{d.data(), count}}, sizeof(float)), DataType::Float32, ReduceOp::Sum, 1.0);
          const float want = static_cast<float>(ranks * (ranks + 1) / 2);
          for (float v : d) {
            if (v != want) throw testing::Failure("all-reduce, " + where(ranks, r, k));
          }
        }
      }
    });
  }
}

// The reduce-scatter of user collectives (reducescatter_rows' segments, uneven) equals the
// ring's bit for bit, for floats whose sums depend on the order, with a postscale.
TEST(shm_reduce_scatter_nranks_equals_the_rings_bit_for_bit) {
  for (int ranks : {2, 3, 5, 8}) {
    for (int64_t rows : {int64_t(1), int64_t(7), int64_t(1001)}) {
      const size_t row = 37, count = static_cast<size_t>(rows) * row;
      Segments segs;
      size_t at = 0;
      for (int64_t n : reducescatter_rows(rows, ranks)) {
        segs.offset.push_back(at);
        segs.count.push_back(static_cast<size_t>(n) * row);
        at += static_cast<size_t>(n) * row;
      }
      std::vector<std::vector<float>> shm(ranks), ring(ranks);
      Fabric fabric(ranks);
      run_ranks(ranks, [&](int r) {
        auto t = fabric.world(r);
        std::mt19937 gen(static_cast<uint32_t>(r * 31 + rows));
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        shm[r].resize(count);
        for (float& v : shm[r]) v = u(gen) * (r % 2 ? 1e4f : 1e-4f);
        ring[r] = shm[r];
        shm_reduce_scatter_nranks(*t, SpanBuffer({{shm[r].data(), count}}, 4), segs, DataType::Float32,
                                  ReduceOp::Sum, 0.5);
        std::vector<uint8_t> scratch;
        ring_reduce_scatter(*t, SpanBuffer({{ring[r].data(), count}}, 4), segs, DataType::Float32,
                            ReduceOp::Sum, 0.5, scratch, 4096);
        CHECK_EQ(t->stats().shared_memory_collectives.load(), uint64_t(1));
      });
      for (int r = 0; r < ranks; ++r) {
        if (std::memcmp(shm[r].data() + segs.offset[r], ring[r].data() + segs.offset[r], segs.count[r] * 4) != 0) {
          throw testing::Failure("reduce-scatter differs from the ring's: " + std::to_string(ranks) +
                                 " ranks, " + std::to_string(rows) + " rows, rank " + std::to_string(r));
        }
      }
    }
  }
}

TEST(shm_collectives_nranks_count_copies_rounds_and_bytes) {
  for (int ranks : {2, 4}) {
  Fabric fabric(ranks);
  run_ranks(ranks, [&](int r) {
    auto t = fabric.world(r);
    // A broadcast of 200000 bytes from rank 1: 4 rounds of 64 KiB pieces; the root copies its
    // buffer into the area, the others copy it out.
    std::vector<uint8_t> buf(200000, r == 1 ? 7 : 0);
    shm_broadcast_nranks(*t, buf.data(), buf.size(), 1);
    for (uint8_t b : buf) CHECK_EQ(b, uint8_t(7));
    CHECK_EQ(t->stats().shared_memory_collectives.load(), uint64_t(1));
    CHECK_EQ(t->stats().shared_memory_rounds.load(), uint64_t(4));
    CHECK_EQ(t->stats().shared_memory_copied_bytes.load(), uint64_t(200000));
    CHECK_EQ(t->stats().bytes_sent.load(), r == 1 ? uint64_t((ranks - 1) * 200000) : uint64_t(0));
    CHECK_EQ(t->stats().bytes_received.load(), r == 1 ? uint64_t(0) : uint64_t(200000));
    CHECK_EQ(t->stats().shared_memory_allreduces.load(), uint64_t(0));
  });
  }
}

TEST(shm_collectives_nranks_fail_when_a_peer_never_comes) {
  for (int ranks : {2, 4}) {
  Fabric fabric(ranks, 0, std::chrono::milliseconds(300));
  run_ranks(ranks, [&](int r) {
    auto t = fabric.world(r);
    if (r == ranks - 1) return;
    std::vector<uint8_t> buf(300000, 1);
    const auto start = std::chrono::steady_clock::now();
    // At 2 ranks the root's pieces fit the queue's free slots: the absent rank is the root.
    const int root = ranks == 2 ? ranks - 1 : 0;
    CHECK_THROWS(shm_broadcast_nranks(*t, buf.data(), buf.size(), root), Status::Internal,
                 "waited 300 ms for its peer through shared memory");
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  });
  }
}

}  // namespace
}  // namespace hvdlite
