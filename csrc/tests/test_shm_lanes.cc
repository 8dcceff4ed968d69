// Shared-memory all-reduces in lanes (shm_lanes.h): 2-5 ranks as threads, each rank's lanes
// threads of their own, over the loopback transport's areas. Results must equal the ring's
// bit for bit (NaNs included, so the operand order is checked too) on data split into
// spans; lanes follow one-lane collectives on the same transport; the counters add up; a
// rank that never comes fails the others, whose lane threads end with them.
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <random>

#include "algorithms/ring_allreduce.h"
#include "algorithms/shm_allreduce.h"
#include "algorithms/shm_lanes.h"
#include "harness.h"
#include "loopback.h"

namespace hvdlite {
namespace {

using testing::Fabric;
using testing::run_ranks;

std::vector<float> floats_with_nans(int rank, size_t count, uint32_t seed) {
  std::mt19937 gen(seed * 977 + static_cast<uint32_t>(rank));
  std::uniform_real_distribution<float> u(-100.0f, 100.0f);
  std::uniform_int_distribution<int> nan_die(0, 997);
  std::vector<float> out(count);
  for (float& x : out) x = nan_die(gen) == 0 ? std::numeric_limits<float>::quiet_NaN() : u(gen);
  return out;
}

// Three spans, the middle one empty, as fusion hands a batch over.
SpanBuffer spans_of(std::vector<float>& d) {
  const size_t first = std::min<size_t>(d.size(), 12345);
  return SpanBuffer({{d.data(), first}, {nullptr, 0}, {d.data() + first, d.size() - first}}, sizeof(float));
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(shm_allreduce_in_lanes_equals_the_ring_bit_for_bit) {
  const size_t count = kLaneMinBytes / sizeof(float) + 4099;  // just above the threshold
  uint32_t seed = 5;
  for (int ranks : {2, 3, 5}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Average}) {
      Fabric fabric(ranks);
      fabric.lanes = 3;
      std::vector<std::vector<float>> shm(ranks), ring(ranks);
      const double post = op == ReduceOp::Average ? 1.0 / ranks : 1.0;
      run_ranks(ranks, [&](int r) {
        auto t = fabric.world(r);
        CHECK_EQ(t->lanes(), 3);
        CHECK(shm_runs_in_lanes(*t, count * sizeof(float)));
        shm[r] = floats_with_nans(r, count, seed);
        ring[r] = shm[r];
        shm_allreduce(*t, spans_of(shm[r]), DataType::Float32, op, post);
        CHECK_EQ(t->stats().shared_memory_extra_lanes.load(), uint64_t(2));
        CHECK_EQ(t->stats().shared_memory_allreduces.load(), uint64_t(1));
        std::vector<uint8_t> scratch;
        ring_allreduce(*t, spans_of(ring[r]), DataType::Float32, op, post, scratch, 4096);
      });
      ++seed;
      for (int r = 0; r < ranks; ++r) {
        if (!same_bits(shm[r], ring[0])) {
          throw testing::Failure("rank " + std::to_string(r) + " of " + std::to_string(ranks) +
                                 " differs from the ring, op " + std::to_string(static_cast<int>(op)));
        }
      }
    }
  }
}

TEST(shm_lanes_default_to_half_the_cores_per_rank) {
  // The 16-core host: 2 ranks 4 lanes, 8 and 16 ranks 1; fewer cores than ranks still one
  // lane; at most 4; and never more areas than 32 MiB hold.
  CHECK_EQ(Transport::auto_lanes(16, 2, Transport::shared_area_bytes(2)), 4);
  CHECK_EQ(Transport::auto_lanes(16, 8, Transport::shared_area_bytes(8)), 1);
  CHECK_EQ(Transport::auto_lanes(16, 16, Transport::shared_area_bytes(16)), 1);
  CHECK_EQ(Transport::auto_lanes(2, 3, Transport::shared_area_bytes(3)), 1);
  CHECK_EQ(Transport::auto_lanes(128, 4, Transport::shared_area_bytes(4)), 4);
  CHECK_EQ(Transport::auto_lanes(64, 8, Transport::shared_area_bytes(8)), 3);  // 3 x 9.4 MiB
  CHECK_EQ(Transport::auto_lanes(64, 2, size_t(20) << 20), 1);
  // Idle lanes (Note [idle lanes]) take all the cores per rank.
  CHECK_EQ(Transport::auto_lanes(16, 8, Transport::shared_area_bytes(8), /*idle_lanes=*/true), 2);
  CHECK_EQ(Transport::auto_lanes(16, 16, Transport::shared_area_bytes(16), /*idle_lanes=*/true), 1);
  CHECK_EQ(Transport::auto_lanes(16, 2, Transport::shared_area_bytes(2), /*idle_lanes=*/true), 4);
}

TEST(idle_lanes_run_at_idle_priority_and_reduce_as_the_ring) {
  // Kept threads of Priority::Idle run their lanes under SCHED_IDLE (the calling thread keeps
  // its policy), and the results are the ring's, bit for bit.
  const int ranks = 3;
  const size_t count = kLaneMinBytes / sizeof(float) + 777;
  Fabric fabric(ranks);
  fabric.lanes = 3;
  std::vector<std::vector<float>> shm(ranks), ring(ranks);
  std::atomic<int> idle_lanes_seen{0}, lanes_seen{0};
  run_ranks(ranks, [&](int r) {
    auto t = fabric.world(r);
    LaneThreads kept(LaneThreads::Priority::Idle);
    // The threads' policy, seen from a task of their own.
    kept.start(2, [&](int) {
      int policy = -1;
      sched_param param{};
      pthread_getschedparam(pthread_self(), &policy, &param);
      ++lanes_seen;
      if (policy == SCHED_IDLE) ++idle_lanes_seen;
    });
    kept.finish();
    int policy = -1;
    sched_param param{};
    pthread_getschedparam(pthread_self(), &policy, &param);
    CHECK(policy != SCHED_IDLE);
    shm[r] = floats_with_nans(r, count, 41);
    ring[r] = shm[r];
    shm_allreduce(*t, spans_of(shm[r]), DataType::Float32, ReduceOp::Sum, 0.25, &kept);
    std::vector<uint8_t> scratch;
    ring_allreduce(*t, spans_of(ring[r]), DataType::Float32, ReduceOp::Sum, 0.25, scratch, 4096);
  });
  CHECK_EQ(lanes_seen.load(), 2 * ranks);
  CHECK_EQ(idle_lanes_seen.load(), 2 * ranks);
  for (int r = 0; r < ranks; ++r) CHECK(same_bits(shm[r], ring[0]));
}

TEST(shm_lanes_and_one_lane_collectives_follow_one_another) {
  // Large (lanes) and small (lane 0 alone) all-reduces interleaved on one transport: each
  // lane's area keeps its own counters in step, and the counters add up as one lane's would.
  // The lanes run on threads kept between calls, as the engine's (lane_threads.h).
  const int ranks = 3;
  Fabric fabric(ranks);
  fabric.lanes = 2;
  const size_t big = kLaneMinBytes / sizeof(float), small = 1000;
  run_ranks(ranks, [&](int r) {
    auto t = fabric.world(r);
    LaneThreads kept;
    for (int i = 0; i < 3; ++i) {
      for (size_t count : {big, small, big + 17}) {
        std::vector<float> d(count, static_cast<float>(r + 1 + i));
        shm_allreduce(*t, SpanBuffer({{d.data(), count}}, sizeof(float)), DataType::Float32, ReduceOp::Sum, 1.0,
                      &kept);
        for (size_t k : {size_t(0), count / 2, count - 1}) CHECK_EQ(d[k], static_cast<float>(6 + 3 * i));
      }
    }
    CHECK_EQ(t->stats().shared_memory_allreduces.load(), uint64_t(9));
    CHECK_EQ(t->stats().shared_memory_extra_lanes.load(), uint64_t(6));
    // As the ring counts it, whatever the lanes: each rank hands the others (n-1)/n of each
    // buffer in the reduce-scatter and its own segment to each in the all-gather.
    const uint64_t elems = 3 * (2 * big + 17 + small);
    CHECK(t->stats().bytes_sent.load() >= 2 * elems * sizeof(float) * 2 / 3 - 64 * 9);
  });
}

TEST(shm_lanes_fail_when_a_peer_never_comes_and_end_their_threads) {
  const int ranks = 3;
  Fabric fabric(ranks, 0, std::chrono::milliseconds(300));
  fabric.lanes = 3;
  run_ranks(ranks, [&](int r) {
    auto t = fabric.world(r);
    if (r == 2) return;
    std::vector<float> d(kLaneMinBytes / sizeof(float), 1.0f);
    const auto start = std::chrono::steady_clock::now();
    CHECK_THROWS(shm_allreduce(*t, SpanBuffer({{d.data(), d.size()}}, sizeof(float)), DataType::Float32,
                               ReduceOp::Sum, 1.0),
                 Status::Internal, "waited 300 ms for its peer through shared memory");
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  });
}

}  // namespace
}  // namespace hvdlite
