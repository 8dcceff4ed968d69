// Small all-reduces riding in the negotiation round at more than 2 ranks (controller.h,
// gathered rounds): 3, 4 and 8 ranks as threads through the engine. A repeated (cached)
// all-reduce rides in the round once the room is agreed, and its bits equal the ring's
// operand order (each element of segment g of even_segments: x[g] + (x[g-1] + (... + x[g+1])),
// written out here) on every rank; a rank that comes late drops the ride for a round
// without changing a bit; the setting at 0 turns the ride off.
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "algorithms/ring_allreduce.h"
#include "engine/engine.h"
#include "harness.h"
#include "loopback.h"

namespace hvdlite {
namespace {

using testing::Fabric;
using testing::run_ranks;

std::vector<float> input_of(int rank, size_t count) {
  std::mt19937 gen(static_cast<unsigned>(rank * 7919 + count));
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> x(count);
  for (float& v : x) v = d(gen) * (rank % 2 ? 1e-3f : 1e3f);  // magnitudes make order matter
  return x;
}

// The ring's sum (ring_allreduce.h): for an element of segment g, the owner g folds
// x[g+1] into x[g+2], ..., the result into x[g].
std::vector<float> ring_order_sum(int n, size_t count) {
  std::vector<std::vector<float>> x;
  for (int r = 0; r < n; ++r) x.push_back(input_of(r, count));
  const Segments segs = even_segments(count, n);
  std::vector<float> out(count);
  for (int g = 0; g < n; ++g) {
    for (size_t i = segs.offset[g]; i < segs.offset[g] + segs.count[g]; ++i) {
      float acc = x[(g + 1) % n][i];
      for (int k = 2; k < n; ++k) acc = x[(g + k) % n][i] + acc;
      out[i] = x[g][i] + acc;
    }
  }
  return out;
}

void run(int n, size_t max_bytes, std::vector<std::vector<uint64_t>>& rides) {
  Fabric fabric(n);
  fabric.gather_rounds = true;
  rides.assign(n, {});
  const std::vector<size_t> counts = {1, 2, 7, 1000};  // 1000 floats: 4000 bytes, within 4096
  const int calls = 5;
  run_ranks(n, [&](int r) {
    Config config;
    config.board_allreduce_max_bytes = max_bytes;
    Engine eng(fabric.world(r), config);
    for (size_t count : counts) {
      const std::vector<float> want = ring_order_sum(n, count);
      for (int call = 0; call < calls; ++call) {
        if (call == 3 && r == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
        std::vector<float> x = input_of(r, count);
        auto e = std::make_unique<TensorEntry>();
        e->request.name = "t" + std::to_string(count);
        e->request.op = OpType::Allreduce;
        e->request.reduce_op = ReduceOp::Sum;
        e->request.shape = {int64_t(count)};
        e->input = e->output = x.data();
        EntryList list;
        list.push_back(std::move(e));
        const uint64_t before = eng.transport_stats().board_allreduces.load();
        Outcome o = eng.wait(eng.enqueue(0, std::move(list))[0]);
        if (o.status != Status::Success) throw testing::Failure("all-reduce failed: " + o.error);
        rides[r].push_back(eng.transport_stats().board_allreduces.load() - before);
        if (std::memcmp(x.data(), want.data(), count * sizeof(float)) != 0) {
          throw testing::Failure("rank " + std::to_string(r) + " of " + std::to_string(n) + ", " +
                                 std::to_string(count) + " floats, call " + std::to_string(call) +
                                 ": not the ring's bits");
        }
      }
    }
  });
}

TEST(board_allreduce_rides_the_round_with_the_rings_bits) {
  for (int n : {3, 4, 8}) {
    std::vector<std::vector<uint64_t>> rides;
    run(n, 4096, rides);
    for (int r = 0; r < n; ++r) {
      CHECK(rides[r] == rides[0]);  // every rank took the same path for every call
      uint64_t total = 0;
      for (uint64_t v : rides[r]) {
        CHECK(v <= 1);
        total += v;
      }
      // Per count: the first call asks the coordinator and the second agrees on the room;
      // the later ones ride (but the one a rank came late to may not).
      CHECK(total >= 4 * 2);
      for (size_t c = 0; c < 4; ++c) CHECK_EQ(rides[r][c * 5 + 0] + rides[r][c * 5 + 1], uint64_t(0));
    }
  }
}

TEST(board_allreduce_turned_off_by_its_setting) {
  std::vector<std::vector<uint64_t>> rides;
  run(3, 0, rides);
  for (const auto& per_rank : rides) {
    for (uint64_t v : per_rank) CHECK_EQ(v, uint64_t(0));
  }
}

}  // namespace
}  // namespace hvdlite
