// The shared-memory all-reduce (shm_allreduce.h): two ranks as threads over the loopback
// transport's in-process shared area. Results must equal the ring's bit for bit (the same
// kernels, operand order and scaling), on data split into spans, across piece and queue
// boundaries, and for collectives that follow one another while one side runs ahead.
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "algorithms/half.h"
#include "algorithms/ring_allreduce.h"
#include "algorithms/shm_allreduce.h"
#include "harness.h"
#include "loopback.h"

namespace hvdlite {
namespace {

using testing::Fabric;
using testing::run_ranks;

// Rank r's input for a case: random values of the dtype (small integers for integer types).
std::vector<uint8_t> input(int rank, size_t count, DataType dtype, uint32_t seed) {
  std::mt19937 gen(seed * 2 + static_cast<uint32_t>(rank));
  std::uniform_real_distribution<double> u(-100.0, 100.0);
  std::vector<uint8_t> out(count * dtype_size(dtype));
  for (size_t i = 0; i < count; ++i) {
    const double v = u(gen);
    switch (dtype) {
      case DataType::Float32: reinterpret_cast<float*>(out.data())[i] = static_cast<float>(v); break;
      case DataType::Float64: reinterpret_cast<double*>(out.data())[i] = v; break;
      case DataType::Int32: reinterpret_cast<int32_t*>(out.data())[i] = static_cast<int32_t>(v); break;
      case DataType::Float16:
        reinterpret_cast<uint16_t*>(out.data())[i] = float_to_fp16(static_cast<float>(v));
        break;
      default: throw testing::Failure("input(): dtype not covered");
    }
  }
  return out;
}

// Each rank's buffer as three spans (the middle one empty), as fusion hands a batch over.
SpanBuffer spans_of(std::vector<uint8_t>& data, size_t count, size_t es) {
  const size_t first = std::min<size_t>(count, 1001);
  return SpanBuffer({{data.data(), first}, {nullptr, 0}, {data.data() + first * es, count - first}}, es);
}

// Runs one case through both algorithms and checks the shared-memory one against the ring.
void check_against_ring(size_t count, DataType dtype, ReduceOp op, double postscale, uint32_t seed) {
  const size_t es = dtype_size(dtype);
  std::vector<std::vector<uint8_t>> shm(2), ring(2);
  Fabric fabric(2);
  run_ranks(2, [&](int r) {
    auto t = fabric.world(r);
    CHECK(shm_allreduce_available(*t));
    shm[r] = input(r, count, dtype, seed);
    ring[r] = shm[r];
    shm_allreduce(*t, spans_of(shm[r], count, es), dtype, op, postscale);
    std::vector<uint8_t> scratch;
    ring_allreduce(*t, spans_of(ring[r], count, es), dtype, op, postscale, scratch, 4096);
  });
  const std::string what = std::string(dtype_name(dtype)) + " " + std::to_string(count) +
                           " elements, op " + std::to_string(static_cast<int>(op));
  if (shm[0] != shm[1]) throw testing::Failure("ranks differ: " + what);
  if (shm[0] != ring[0]) throw testing::Failure("differs from the ring: " + what);
}

TEST(shm_allreduce_equals_the_ring_bit_for_bit) {
  // 64 KiB pieces, 7 slots per queue: 16384 floats a piece; 300,000 floats take 10 pieces
  // per half, so the queues wrap around.
  const size_t counts[] = {0, 1, 2, 3, 16383, 16384 * 2 + 1, 300000};
  uint32_t seed = 1;
  for (size_t count : counts) {
    check_against_ring(count, DataType::Float32, ReduceOp::Sum, 1.0, seed++);
  }
  check_against_ring(300000, DataType::Float32, ReduceOp::Average, 0.5, seed++);  // 1/2 x 0.5
  check_against_ring(70001, DataType::Float64, ReduceOp::Sum, 3.0, seed++);
  check_against_ring(70001, DataType::Float16, ReduceOp::Average, 0.5, seed++);
  check_against_ring(70001, DataType::Int32, ReduceOp::Average, 0.5, seed++);
  check_against_ring(70001, DataType::Float32, ReduceOp::Min, 1.0, seed++);
  check_against_ring(70001, DataType::Float32, ReduceOp::Max, 1.0, seed++);
  check_against_ring(70001, DataType::Float32, ReduceOp::Product, 1.0, seed++);
}

TEST(shm_allreduce_collectives_follow_one_another_in_step) {
  // Many collectives of varying sizes; now one side, now the other runs ahead of its peer
  // (it may start the next collective while the peer still copies out the last one).
  Fabric fabric(2);
  std::vector<std::vector<std::vector<float>>> results(2);
  const int rounds = 60;
  run_ranks(2, [&](int r) {
    auto t = fabric.world(r);
    for (int k = 0; k < rounds; ++k) {
      const size_t count = 1 + (static_cast<size_t>(k) * 104729) % 200000;
      std::vector<float> d(count);
      for (size_t i = 0; i < count; ++i) d[i] = static_cast<float>((r + 1) * (k + 1)) + 0.25f * static_cast<float>(i % 7);
      if (k % 7 == r * 3) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      shm_allreduce(*t, SpanBuffer({{d.data(), count}}, sizeof(float)), DataType::Float32,
                    ReduceOp::Sum, 1.0);
      results[r].push_back(std::move(d));
    }
  });
  for (int k = 0; k < rounds; ++k) {
    const std::vector<float>& d = results[0][k];
    CHECK(d == results[1][k]);
    for (size_t i = 0; i < d.size(); ++i) {
      const float want = static_cast<float>(3 * (k + 1)) + 0.5f * static_cast<float>(i % 7);
      if (d[i] != want) {
        throw testing::Failure("collective " + std::to_string(k) + " element " + std::to_string(i) +
                               ": " + std::to_string(d[i]) + " != " + std::to_string(want));
      }
    }
  }
}

TEST(shm_allreduce_counts_the_bytes_the_ring_counts) {
  Fabric fabric(2);
  run_ranks(2, [&](int r) {
    auto t = fabric.world(r);
    std::vector<double> d(100001, 1.0);
    shm_allreduce(*t, SpanBuffer({{d.data(), d.size()}}, sizeof(double)), DataType::Float64,
                  ReduceOp::Sum, 1.0);
    CHECK_EQ(t->stats().bytes_sent, uint64_t(d.size() * sizeof(double)));
    CHECK_EQ(t->stats().bytes_received, uint64_t(d.size() * sizeof(double)));
  });
}

TEST(shm_allreduce_at_two_ranks_needs_one_host_and_an_area) {
  // (More ranks on one host: test_shm_allreduce_nranks.cc.)
  Fabric two_hosts(2, /*ranks_per_host=*/1);
  run_ranks(2, [&](int r) { CHECK(!shm_allreduce_available(*two_hosts.world(r))); });
  Fabric no_area(2, 0, std::chrono::seconds(20), /*shared_area_bytes=*/0);
  run_ranks(2, [&](int r) { CHECK(!shm_allreduce_available(*no_area.world(r))); });
  // A process set of two ranks of one host gets an area of its own.
  Fabric four(4);
  run_ranks(4, [&](int r) {
    auto world = four.world(r);
    auto pair = world->split(r / 2, r, Transport::SplitFor::ProcessSet);
    CHECK(shm_allreduce_available(*pair));
    std::vector<float> d(50000, static_cast<float>(r));
    shm_allreduce(*pair, SpanBuffer({{d.data(), d.size()}}, sizeof(float)), DataType::Float32,
                  ReduceOp::Sum, 1.0);
    const float want = r < 2 ? 1.0f : 5.0f;
    for (float v : d) CHECK_EQ(v, want);
  });
}

TEST(shm_allreduce_waits_on_a_missing_peer_through_the_transport) {
  // The peer never comes: the wait goes through Transport::waiting_for_peer (which the MPI
  // backend uses to notice a lost peer), so the rank fails instead of spinning forever.
  Fabric fabric(2, 0, std::chrono::milliseconds(200));
  run_ranks(2, [&](int r) {
    auto t = fabric.world(r);
    if (r == 1) return;
    std::vector<float> d(100000, 1.0f);
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS(shm_allreduce(*t, SpanBuffer({{d.data(), d.size()}}, sizeof(float)),
                               DataType::Float32, ReduceOp::Sum, 1.0),
                 Status::Internal, "waited 200 ms for its peer through shared memory");
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  });
}

}  // namespace
}  // namespace hvdlite
