// The N-rank shared-memory all-reduce (shm_allreduce_nranks.h): 2-8 ranks as threads over the
// loopback transport's in-process shared area. Results must equal the ring's bit for bit for
// every dtype and op (NaNs included: Min and Max keep whichever operand their position
// favours, so this checks the operand order too), on data split into spans, across piece,
// round and slot boundaries; collectives follow one another while ranks run ahead; a rank
// that never comes fails the others; the counters match the algorithm's count.
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

#include "algorithms/half.h"
#include "algorithms/ring_allreduce.h"
#include "algorithms/shm_allreduce.h"
#include "algorithms/shm_allreduce_nranks.h"
#include "harness.h"
#include "loopback.h"

namespace hvdlite {
namespace {

using testing::Fabric;
using testing::run_ranks;

// Rank r's input: random values of the dtype (small integers for integer types, so products
// stay in range), with a NaN now and then for floating types.
std::vector<uint8_t> input(int rank, size_t count, DataType dtype, uint32_t seed) {
  std::mt19937 gen(seed * 131 + static_cast<uint32_t>(rank));
  std::uniform_real_distribution<double> u(-100.0, 100.0);
  std::uniform_int_distribution<int> small(-3, 3), nan_die(0, 97);
  std::vector<uint8_t> out(count * dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) {
    const double v = nan_die(gen) == 0 ? std::numeric_limits<double>::quiet_NaN() : u(gen);
    const int k = small(gen);
    void* p = out.data();
    switch (dtype) {
      case DataType::Float32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
      case DataType::Float64: static_cast<double*>(p)[i] = v; break;
      case DataType::Float16: static_cast<uint16_t*>(p)[i] = float_to_fp16(static_cast<float>(v)); break;
      case DataType::BFloat16: static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v)); break;
      case DataType::UInt8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(k + 3); break;
      case DataType::Int8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(k); break;
      case DataType::Int16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(k); break;
      case DataType::UInt16: static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(k + 3); break;
      case DataType::Int32: static_cast<int32_t*>(p)[i] = k; break;
      case DataType::Int64: static_cast<int64_t*>(p)[i] = k; break;
      case DataType::Bool: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(k > 0); break;
    }
  }
  return out;
}

// Each rank's buffer as three spans (the middle one empty), as fusion hands a batch over.
SpanBuffer spans_of(std::vector<uint8_t>& data, size_t count, size_t es) {
  const size_t first = std::min<size_t>(count, 1001);
  return SpanBuffer({{data.data(), first}, {nullptr, 0}, {data.data() + first * es, count - first}}, es);
}

// One case through both algorithms at `ranks` ranks: the shared-memory result must be the
// same bits on every rank, and the ring's.
void check_against_ring(int ranks, size_t count, DataType dtype, ReduceOp op, double postscale,
                        uint32_t seed) {
  const size_t es = dtype_size(dtype);
  std::vector<std::vector<uint8_t>> shm(ranks), ring(ranks);
  Fabric fabric(ranks);
  run_ranks(ranks, [&](int r) {
    auto t = fabric.world(r);
    CHECK(shm_allreduce_nranks_available(*t));
    shm[r] = input(r, count, dtype, seed);
    ring[r] = shm[r];
    shm_allreduce_nranks(*t, spans_of(shm[r], count, es), dtype, op, postscale);
    std::vector<uint8_t> scratch;
    ring_allreduce(*t, spans_of(ring[r], count, es), dtype, op, postscale, scratch, 4096);
  });
  const std::string what = std::to_string(ranks) + " ranks, " + dtype_name(dtype) + " " +
                           std::to_string(count) + " elements, op " + std::to_string(static_cast<int>(op));
  for (int r = 1; r < ranks; ++r) {
    if (shm[r] != shm[0]) throw testing::Failure("rank " + std::to_string(r) + " differs from rank 0: " + what);
  }
  if (shm[0] != ring[0]) throw testing::Failure("differs from the ring: " + what);
}

TEST(shm_allreduce_nranks_equals_the_ring_bit_for_bit) {
  // Pieces of 64 KiB at 2-4 ranks (16384 floats), smaller at 8: 600,000 floats take several
  // rounds per segment, so the two slots are reused; the small counts leave segments empty.
  uint32_t seed = 1;
  for (int ranks = 2; ranks <= 8; ++ranks) {
    for (size_t count : {size_t(1), size_t(ranks) - 1, size_t(ranks) + 1, size_t(16384) * ranks + 1, size_t(600000)}) {
      check_against_ring(ranks, count, DataType::Float32, ReduceOp::Sum, 1.0, seed++);
    }
  }
  const DataType dtypes[] = {DataType::Float32, DataType::Float64, DataType::Float16, DataType::BFloat16,
                             DataType::UInt8, DataType::Int8, DataType::Int16, DataType::UInt16,
                             DataType::Int32, DataType::Int64, DataType::Bool};
  const ReduceOp ops[] = {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product};
  for (int ranks : {3, 5}) {
    for (DataType dtype : dtypes) {
      for (ReduceOp op : ops) {
        if (dtype == DataType::Bool && (op == ReduceOp::Average || op == ReduceOp::Sum)) continue;
        const double post = op == ReduceOp::Average ? 1.0 / ranks : (op == ReduceOp::Sum ? 0.5 : 1.0);
        check_against_ring(ranks, 40001, dtype, op, post, seed++);
      }
    }
  }
  check_against_ring(8, 100003, DataType::Float16, ReduceOp::Average, 0.125, seed++);
  check_against_ring(7, 100003, DataType::Float64, ReduceOp::Min, 1.0, seed++);
}

TEST(shm_reduce_scatter_and_allgather_nranks_equal_the_rings) {
  // The halves alone (hierarchical all-reduce's stages within a host): the reduce-scatter's
  // own segment equals ring_reduce_scatter's, and with the all-gather after it, the whole
  // buffer equals the ring all-reduce's; on one area with all-reduces in between.
  for (int ranks : {2, 3, 6}) {
    const size_t count = 90001;
    const DataType dtype = DataType::Float32;
    std::vector<std::vector<uint8_t>> shm(ranks), ring(ranks);
    std::vector<uint8_t> shm_seg[8], ring_seg[8];
    Fabric fabric(ranks);
    run_ranks(ranks, [&](int r) {
      auto t = fabric.world(r);
      const Segments segs = even_segments(count, ranks);
      const size_t at = segs.offset[r] * 4, bytes = segs.count[r] * 4;
      std::vector<uint8_t> a = input(r, count, dtype, 77), b = a, scratch;
      shm_reduce_scatter_nranks(*t, spans_of(a, count, 4), dtype, ReduceOp::Sum, 0.5);
      ring_reduce_scatter(*t, spans_of(b, count, 4), segs, dtype, ReduceOp::Sum, 0.5, scratch, 4096);
      shm_seg[r].assign(a.begin() + at, a.begin() + at + bytes);
      ring_seg[r].assign(b.begin() + at, b.begin() + at + bytes);
      std::vector<uint8_t> c = input(r, count, dtype, 78);
      shm_allreduce_nranks(*t, spans_of(c, count, 4), dtype, ReduceOp::Max, 1.0);
      shm[r] = input(r, count, dtype, 79);
      ring[r] = shm[r];
      shm_reduce_scatter_nranks(*t, spans_of(shm[r], count, 4), dtype, ReduceOp::Min, 1.0);
      shm_allgather_nranks(*t, spans_of(shm[r], count, 4));
      ring_allreduce(*t, spans_of(ring[r], count, 4), dtype, ReduceOp::Min, 1.0, scratch, 4096);
    });
    for (int r = 0; r < ranks; ++r) {
      if (shm_seg[r] != ring_seg[r]) throw testing::Failure("reduce-scatter, rank " + std::to_string(r) + " of " + std::to_string(ranks));
      if (shm[r] != ring[r]) throw testing::Failure("reduce-scatter + all-gather, rank " + std::to_string(r) + " of " + std::to_string(ranks));
    }
  }
}

TEST(shm_allreduce_nranks_collectives_follow_one_another_while_ranks_run_ahead) {
  // Many collectives of varying sizes at 5 ranks; now one rank, now another sleeps, so the
  // others start the next collective while it still copies out the last.
  const int ranks = 5, rounds = 40;
  Fabric fabric(ranks);
  std::vector<std::vector<std::vector<float>>> results(ranks);
  run_ranks(ranks, [&](int r) {
    auto t = fabric.world(r);
    for (int k = 0; k < rounds; ++k) {
      const size_t count = 1 + (static_cast<size_t>(k) * 104729) % 300000;
      std::vector<float> d(count);
      for (size_t i = 0; i < count; ++i) d[i] = static_cast<float>((r + 1) * (k + 1)) + 0.25f * static_cast<float>(i % 7);
      if (k % ranks == r) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      shm_allreduce(*t, SpanBuffer({{d.data(), count}}, sizeof(float)), DataType::Float32, ReduceOp::Sum, 1.0);
      results[r].push_back(std::move(d));
    }
  });
  for (int k = 0; k < rounds; ++k) {
    const std::vector<float>& d = results[0][k];
    for (int r = 1; r < ranks; ++r) CHECK(d == results[r][k]);
    for (size_t i = 0; i < d.size(); ++i) {
      const float want = static_cast<float>(15 * (k + 1)) + 1.25f * static_cast<float>(i % 7);
      if (d[i] != want) {
        throw testing::Failure("collective " + std::to_string(k) + " element " + std::to_string(i) +
                               ": " + std::to_string(d[i]) + " != " + std::to_string(want));
      }
    }
  }
}

TEST(shm_allreduce_nranks_counts_copies_rounds_and_the_rings_bytes) {
  const int ranks = 4;
  Fabric fabric(ranks);
  run_ranks(ranks, [&](int r) {
    auto t = fabric.world(r);
    const size_t count = 100003;  // segments of 25001, 25001, 25001, 25000 doubles
    std::vector<double> d(count, 1.0);
    shm_allreduce(*t, SpanBuffer({{d.data(), d.size()}}, sizeof(double)), DataType::Float64, ReduceOp::Sum, 1.0);
    for (double v : d) CHECK_EQ(v, 4.0);
    const uint64_t total = count * 8, own = (r < 3 ? 25001 : 25000) * 8;
    CHECK_EQ(t->stats().shared_memory_allreduces.load(), uint64_t(1));
    CHECK_EQ(t->stats().shared_memory_copied_bytes.load(), 2 * total - own);
    // 64 KiB pieces: 8192 doubles; 25001 of them take 4 rounds.
    CHECK_EQ(shm_allreduce_nranks_piece_bytes(Transport::shared_area_bytes(ranks), ranks), size_t(64) << 10);
    CHECK_EQ(t->stats().shared_memory_rounds.load(), uint64_t(4));
    // The ring's count: with equal segments, 2 (N-1)/N of the buffer each way.
    CHECK_EQ(t->stats().bytes_sent.load(), (total - own) + 3 * own);
    CHECK_EQ(t->stats().bytes_received.load(), (total - own) + 3 * own);
  });
  // At 16 ranks the area (16 MiB) holds smaller pieces.
  const size_t piece16 = shm_allreduce_nranks_piece_bytes(Transport::shared_area_bytes(16), 16);
  CHECK(piece16 >= (size_t(16) << 10) && piece16 < (size_t(64) << 10));
}

TEST(shm_allreduce_for_the_ranks_of_one_host) {
  Fabric three(3);
  run_ranks(3, [&](int r) { CHECK(shm_allreduce_available(*three.world(r))); });
  Fabric two_hosts(4, /*ranks_per_host=*/2);
  run_ranks(4, [&](int r) { CHECK(!shm_allreduce_available(*two_hosts.world(r))); });
  Fabric no_area(3, 0, std::chrono::seconds(20), /*shared_area_bytes=*/0);
  run_ranks(3, [&](int r) { CHECK(!shm_allreduce_available(*no_area.world(r))); });
  // Process sets of three ranks of one host get areas of their own.
  Fabric six(6);
  run_ranks(6, [&](int r) {
    auto world = six.world(r);
    auto trio = world->split(r % 2, r, Transport::SplitFor::ProcessSet);
    CHECK(shm_allreduce_available(*trio));
    std::vector<float> d(50000, static_cast<float>(r));
    shm_allreduce(*trio, SpanBuffer({{d.data(), d.size()}}, sizeof(float)), DataType::Float32, ReduceOp::Sum, 1.0);
    const float want = r % 2 == 0 ? 6.0f : 9.0f;  // 0+2+4, 1+3+5
    for (float v : d) CHECK_EQ(v, want);
  });
}

TEST(shm_allreduce_nranks_fails_when_a_peer_never_comes) {
  // Rank 3 of 4 never comes: the others' waits go through Transport::waiting_for_peer (which
  // the MPI backend uses to notice a lost peer), so they fail instead of spinning forever.
  const int ranks = 4;
  Fabric fabric(ranks, 0, std::chrono::milliseconds(300));
  run_ranks(ranks, [&](int r) {
    auto t = fabric.world(r);
    if (r == 3) return;
    std::vector<float> d(200000, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS(shm_allreduce(*t, SpanBuffer({{d.data(), d.size()}}, sizeof(float)),
                               DataType::Float32, ReduceOp::Sum, 1.0),
                 Status::Internal, "waited 300 ms for its peer through shared memory");
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  });
}

}  // namespace
}  // namespace hvdlite
