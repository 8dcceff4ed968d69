// Hierarchical all-reduce over the loopback transport with ranks placed on hosts: it is used
// only where the topology calls for it, its results follow the flat ring's rules (bitwise
// identical on every rank, Average by the group's size), and it sends 2/3 of the flat ring's
// bytes across hosts at 2 hosts x 2 ranks (counted by the fabric, not computed).
#include <cstring>
#include <random>

#include "engine/engine.h"
#include "algorithms/hierarchical.h"
#include "harness.h"
#include "loopback.h"

namespace hvdlite {
namespace {

using testing::Fabric;
using testing::run_ranks;

TEST(hierarchy_only_where_the_topology_calls_for_it) {
  struct Case { int size, per_host, config; bool expected; };
  for (Case c : {Case{4, 2, Config::kHierarchicalAuto, true}, Case{6, 3, 1, true},
                 Case{6, 2, Config::kHierarchicalAuto, true}, Case{2, 1, 1, false},
                 Case{3, 3, 1, false}, Case{4, 2, 0, false}}) {
    Fabric fabric(c.size, c.per_host);
    run_ranks(c.size, [&](int r) {
      auto t = fabric.world(r);
      Config config;
      config.hierarchical_allreduce = c.config;
      auto h = make_hierarchy(*t, config);
      CHECK_EQ(h != nullptr, c.expected);
      if (h) {
        CHECK_EQ(h->intra->size(), c.per_host);
        CHECK_EQ(h->intra->rank(), r % c.per_host);
        CHECK_EQ(h->cross->size(), c.size / c.per_host);
        CHECK_EQ(h->cross->rank(), r / c.per_host);
      }
    });
  }
}

// Runs one all-reduce of `count` floats per rank, flat or hierarchical; returns every rank's
// result and the bytes that crossed hosts. chunk_bytes: the hierarchical pipeline's chunk.
std::pair<std::vector<std::vector<float>>, size_t> run_allreduce(int size, int per_host, bool hierarchical,
                                                                 size_t count, ReduceOp op, double post,
                                                                 size_t chunk_bytes = Config().hierarchical_chunk_bytes) {
  Fabric fabric(size, per_host);
  std::vector<std::vector<float>> data(size, std::vector<float>(count));
  run_ranks(size, [&](int r) {
    auto t = fabric.world(r);
    Config config;
    config.hierarchical_allreduce = hierarchical ? 1 : 0;
    config.hierarchical_chunk_bytes = chunk_bytes;
    auto h = make_hierarchy(*t, config);
    CHECK_EQ(h != nullptr, hierarchical);
    std::mt19937 rng(r + 1);
    std::uniform_int_distribution<int> u(-50, 50);
    for (float& x : data[r]) x = float(u(rng)) / 4;
    std::vector<uint8_t> scratch;
    SpanBuffer buf({{data[r].data(), count / 3}, {data[r].data() + count / 3, count - count / 3}}, 4);
    if (h) hierarchical_allreduce(*h, buf, DataType::Float32, op, post, scratch, 40);
    else ring_allreduce(*t, buf, DataType::Float32, op, post, scratch, 40);
  });
  return {data, fabric.cross_host_bytes()};
}

TEST(hierarchical_allreduce_follows_the_flat_rings_rules) {
  for (auto shape : {std::pair<int, int>{4, 2}, {6, 3}, {6, 2}, {8, 4}}) {
    for (size_t count : {size_t(1), size_t(5), size_t(1001)}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Max}) {
        const double post = op == ReduceOp::Average ? 1.0 / shape.first : 1.0;
        auto flat = run_allreduce(shape.first, shape.second, false, count, op, post);
        // One chunk, and pipelines of many (a chunk of 3 floats, of 64 bytes: uneven tails).
        for (size_t chunk_bytes : {Config().hierarchical_chunk_bytes, size_t(12), size_t(64)}) {
          auto hier = run_allreduce(shape.first, shape.second, true, count, op, post, chunk_bytes);
          for (int r = 0; r < shape.first; ++r) {
            // Bitwise identical on every rank; and equal to the flat ring's result here, since
            // sums of quarters are exact in any order.
            CHECK(std::memcmp(hier.first[r].data(), hier.first[0].data(), count * 4) == 0);
            CHECK(std::memcmp(hier.first[r].data(), flat.first[r].data(), count * 4) == 0);
          }
        }
      }
    }
  }
}

// The stages within a host through shared memory (shm_allreduce_nranks.h) give the bits the
// ring gives there: random floats, whose sums depend on the order.
TEST(hierarchical_allreduce_through_shared_memory_gives_the_rings_bits) {
  for (auto shape : {std::pair<int, int>{4, 2}, {6, 3}, {8, 4}}) {
    // One chunk; pipelines of many (uneven tails).
    for (auto [count, chunk_bytes] : {std::pair<size_t, size_t>{100003, Config().hierarchical_chunk_bytes},
                                      {20001, 4096}, {2001, 64}}) {
      std::vector<std::vector<float>> results[2];
      for (int shm = 0; shm < 2; ++shm) {
        const int size = shape.first;
        Fabric fabric(size, shape.second);
        results[shm].assign(size, std::vector<float>(count));
        run_ranks(size, [&](int r) {
          auto t = fabric.world(r);
          Config config;
          config.hierarchical_allreduce = 1;
          config.hierarchical_chunk_bytes = chunk_bytes;
          config.shm_allreduce_min_bytes = shm ? 1 : 0;
          auto h = make_hierarchy(*t, config);
          CHECK(h != nullptr);
          CHECK_EQ(h->shm_min_bytes, size_t(shm));
          std::mt19937 rng(r + 7);
          std::uniform_real_distribution<float> u(-1.0f, 1.0f);
          std::vector<float>& d = results[shm][r];
          for (float& x : d) x = u(rng);
          std::vector<uint8_t> scratch;
          SpanBuffer buf({{d.data(), 777}, {d.data() + 777, count - 777}}, 4);
          hierarchical_allreduce(*h, buf, DataType::Float32, ReduceOp::Average, 1.0 / size, scratch, 4096);
          if (shm) CHECK(h->intra->stats().shared_memory_rounds.load() > 0);
        });
      }
      for (int r = 0; r < shape.first; ++r) {
        CHECK(std::memcmp(results[1][r].data(), results[0][0].data(), count * 4) == 0);
      }
    }
  }
}

TEST(hierarchical_allreduce_sends_two_thirds_of_the_flat_cross_host_bytes) {
  const size_t count = 1 << 16;  // 256 KiB of float32
  const size_t flat = run_allreduce(4, 2, false, count, ReduceOp::Sum, 1.0).second;
  const size_t hier = run_allreduce(4, 2, true, count, ReduceOp::Sum, 1.0).second;
  CHECK_EQ(flat, 3 * count * 4);  // 2 links across hosts x 6 steps x a quarter of the data
  CHECK_EQ(hier, 2 * count * 4);  // 2 rings across hosts, each an all-reduce of half the data
  // Cut into a pipeline of 16 chunks, the bytes stay the same.
  CHECK_EQ(run_allreduce(4, 2, true, count, ReduceOp::Sum, 1.0, count * 4 / 16).second, 2 * count * 4);
}

// Through the engine: the global set of 2 hosts x 2 ranks all-reduces hierarchically (fewer
// bytes across hosts) unless HVDLITE_HIERARCHICAL_ALLREDUCE=0; a process set with one rank per
// host falls back to the flat ring.
TEST(engine_uses_the_hierarchy_of_each_group) {
  auto cross_bytes = [](int hierarchical, std::vector<int> set_ranks) {
    Fabric fabric(4, 2);
    run_ranks(4, [&](int r) {
      Config config;
      config.hierarchical_allreduce = hierarchical;
      config.exchange_max_bytes = 0;  // the flat ring's traffic is the reference
      Engine eng(fabric.world(r), config);
      int set = 0;
      if (!set_ranks.empty()) set = eng.add_process_set(set_ranks);
      if (eng.process_set(set).rank < 0) return;
      std::vector<float> x(4096, float(r + 1));
      auto e = std::make_unique<TensorEntry>();
      e->request.name = "x";
      e->request.reduce_op = ReduceOp::Average;
      e->request.shape = {int64_t(x.size())};
      e->input = e->output = x.data();
      EntryList list;
      list.push_back(std::move(e));
      Outcome o = eng.wait(eng.enqueue(set, std::move(list))[0]);
      CHECK(o.status == Status::Success);
      float expected = 0;
      for (int m : eng.process_set(set).ranks) expected += float(m + 1);
      expected /= float(eng.process_set(set).ranks.size());
      for (float v : x) CHECK_EQ(v, expected);
    });
    return fabric.cross_host_bytes();
  };
  const size_t flat = cross_bytes(0, {}), hier = cross_bytes(Config::kHierarchicalAuto, {});
  CHECK_EQ(flat, size_t(3 * 4096 * 4));
  CHECK_EQ(hier, size_t(2 * 4096 * 4));
  // Ranks 0 and 2 are one per host: the same bytes whatever the setting.
  CHECK_EQ(cross_bytes(1, {0, 2}), cross_bytes(0, {0, 2}));
}

}  // namespace
}  // namespace hvdlite
