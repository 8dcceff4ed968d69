// The ring all-reduce at 1 to 7 ranks over the loopback transport, on data split into spans
// (as fusion hands it over), and Tensor Fusion's executor: packed and in-place members,
// compression, several batches, and a joined rank's zeros.
#include <cstring>
#include <random>

#include "algorithms/exchange_allreduce.h"
#include "engine/fusion.h"
#include "algorithms/half.h"
#include "algorithms/ring_allreduce.h"
#include "harness.h"
#include "loopback.h"

namespace hvdlite {
namespace {

using testing::Fabric;
using testing::run_ranks;

TEST(span_buffer_walks_runs_across_spans) {
  std::vector<int> a(3), b(0), c(5);
  SpanBuffer buf({{a.data(), 3}, {b.data(), 0}, {c.data(), 5}}, sizeof(int));
  CHECK_EQ(buf.count(), size_t(8));
  std::vector<std::pair<char*, size_t>> runs;
  buf.for_each_run(2, 4, [&](char* p, size_t n) { runs.push_back({p, n}); });
  CHECK_EQ(runs.size(), size_t(2));
  CHECK(runs[0].first == reinterpret_cast<char*>(a.data() + 2) && runs[0].second == 1);
  CHECK(runs[1].first == reinterpret_cast<char*>(c.data()) && runs[1].second == 3);
  runs.clear();
  buf.for_each_run(8, 0, [&](char* p, size_t n) { runs.push_back({p, n}); });
  CHECK(runs.empty());
  Segments s = even_segments(8, 3);
  CHECK(s.count == std::vector<size_t>({3, 3, 2}) && s.offset == std::vector<size_t>({0, 3, 6}));
}

// Which all-reduce a case runs: the ring, or the exchange (recursive doubling).
bool g_exchange = false;

// Each rank's data is split into three spans (one empty) and reduced with tiny pieces.
template <typename T>
void ring_case(int n, size_t count, DataType dtype, ReduceOp op, double postscale,
               const std::function<T(int rank, size_t i)>& value,
               const std::function<T(size_t i)>& expected) {
  Fabric fabric(n);
  std::vector<std::vector<T>> data(n, std::vector<T>(count));
  run_ranks(n, [&](int r) {
    auto t = fabric.world(r);
    std::vector<T>& d = data[r];
    for (size_t i = 0; i < count; ++i) d[i] = value(r, i);
    const size_t first = std::min<size_t>(count, 3);
    std::vector<uint8_t> scratch;
    SpanBuffer buf({{d.data(), first}, {nullptr, 0}, {d.data() + first, count - first}}, sizeof(T));
    if (g_exchange) exchange_allreduce(*t, buf, dtype, op, postscale, scratch);
    else ring_allreduce(*t, buf, dtype, op, postscale, scratch, /*piece_bytes=*/3 * sizeof(T));
  });
  for (int r = 0; r < n; ++r) {
    CHECK(std::memcmp(data[r].data(), data[0].data(), count * sizeof(T)) == 0);  // bitwise equal
    for (size_t i = 0; i < count; ++i) {
      if (!(data[r][i] == expected(i))) {
        throw testing::Failure(std::string(g_exchange ? "exchange" : "ring") + " at " + std::to_string(n) + " ranks, " + std::to_string(count) +
                               " elements: element " + std::to_string(i) + " on rank " + std::to_string(r) +
                               " is " + std::to_string(double(data[r][i])) + ", expected " +
                               std::to_string(double(expected(i))));
      }
    }
  }
}

void allreduce_at_1_to_7_ranks() {
  for (int n = 1; n <= 7; ++n) {
    for (size_t count : {size_t(0), size_t(1), size_t(n - 1), size_t(n), size_t(2 * n + 3), size_t(1000)}) {
      // Sums of small integers are exact in float32 whatever the order.
      ring_case<float>(n, count, DataType::Float32, ReduceOp::Sum, 1.0,
                       [](int r, size_t i) { return float(r + 1) * float(i % 7); },
                       [n](size_t i) { return float(n * (n + 1) / 2) * float(i % 7); });
      ring_case<int32_t>(n, count, DataType::Int32, ReduceOp::Max, 1.0,
                         [](int r, size_t i) { return int32_t((r * 31 + i * 17) % 23) - 11; },
                         [n](size_t i) {
                           int32_t m = INT32_MIN;
                           for (int r = 0; r < n; ++r) m = std::max(m, int32_t((r * 31 + i * 17) % 23) - 11);
                           return m;
                         });
      // Average: the postscale is applied once, by each segment's owner.
      ring_case<double>(n, count, DataType::Float64, ReduceOp::Average, 1.0 / n,
                        [](int r, size_t i) { return double(i) + r; },
                        [n](size_t i) { return (double(i) * n + n * (n - 1) / 2.0) * (1.0 / n); });
    }
  }
}

TEST(ring_allreduce_at_1_to_7_ranks) { allreduce_at_1_to_7_ranks(); }

// The same cases (powers of two and the folding of ranks beyond them), by recursive doubling.
TEST(exchange_allreduce_at_1_to_7_ranks) {
  g_exchange = true;
  try {
    allreduce_at_1_to_7_ranks();
    for (int n = 1; n <= 7; ++n) {
      ring_case<uint16_t>(n, 37, DataType::Float16, ReduceOp::Sum, 1.0,
                          [](int r, size_t i) { return float_to_fp16(0.5f * float(r) + float(i % 5)); },
                          [n](size_t i) { return float_to_fp16(0.25f * n * (n - 1) + float(n) * float(i % 5)); });
    }
  } catch (...) {
    g_exchange = false;
    throw;
  }
  g_exchange = false;
}

// Random floats averaged at 2..7 ranks: every rank ends with the same bits. `reduce` runs one
// rank's all-reduce of its `count` floats in `buf`.
template <typename Reduce>
void random_floats_case(size_t count, Reduce reduce) {
  for (int n = 2; n <= 7; ++n) {
    Fabric fabric(n);
    std::vector<std::vector<float>> data(n, std::vector<float>(count));
    run_ranks(n, [&](int r) {
      std::mt19937 rng(r);
      std::uniform_real_distribution<float> u(-1, 1);
      for (float& x : data[r]) x = u(rng);
      auto t = fabric.world(r);
      std::vector<uint8_t> scratch;
      reduce(*t, data[r].data(), n, scratch);
    });
    for (int r = 1; r < n; ++r) CHECK(std::memcmp(data[r].data(), data[0].data(), count * 4) == 0);
  }
}

TEST(exchange_allreduce_random_floats_are_bitwise_identical_on_every_rank) {
  random_floats_case(1031, [](Transport& t, float* buf, int n, std::vector<uint8_t>& scratch) {
    exchange_allreduce(t, SpanBuffer({{buf, 500}, {buf + 500, 1031 - 500}}, 4),
                       DataType::Float32, ReduceOp::Average, 1.0 / n, scratch);
  });
}

TEST(ring_allreduce_float16_reduces_in_float32) {
  for (int n = 1; n <= 7; ++n) {
    ring_case<uint16_t>(n, 37, DataType::Float16, ReduceOp::Sum, 1.0,
                        [](int r, size_t i) { return float_to_fp16(0.5f * float(r) + float(i % 5)); },
                        [n](size_t i) { return float_to_fp16(0.25f * n * (n - 1) + float(n) * float(i % 5)); });
  }
}

TEST(ring_allreduce_random_floats_are_bitwise_identical_on_every_rank) {
  random_floats_case(4099, [](Transport& t, float* buf, int n, std::vector<uint8_t>& scratch) {
    ring_allreduce(t, SpanBuffer({{buf, 4099}}, 4), DataType::Float32, ReduceOp::Average,
                   1.0 / n, scratch, 1000);
  });
}

// Fusion: members of several sizes, fused into batches by the threshold, some packed and some
// in place, one compressed to fp16; rank 2 has joined and contributes zeros.
TEST(fusion_executor_packs_small_and_spans_large_members) {
  const int n = 3;
  Fabric fabric(n);
  Config config;
  config.fusion_threshold = 96 * 1024;  // the 64 KiB member and the small ones split batches
  config.ring_piece_bytes = 4096;
  const std::vector<size_t> counts = {5, 16384, 1, 3000, 20000};
  std::vector<std::vector<std::vector<float>>> out(n);
  run_ranks(n, [&](int r) {
    auto t = fabric.world(r);
    std::vector<std::unique_ptr<TensorEntry>> entries;
    std::vector<std::vector<float>> in(counts.size());
    out[r].resize(counts.size());
    int completed = 0;
    AllreduceExecutor exec(*t, config, [&](TensorEntry* e, Outcome o) {
      CHECK(o.status == Status::Success);
      e->done = true;
      ++completed;
    });
    for (size_t k = 0; k < counts.size(); ++k) {
      in[k].resize(counts[k]);
      out[r][k].assign(counts[k], -1.0f);
      for (size_t i = 0; i < counts[k]; ++i) in[k][i] = float(r + 1) * float((i + k) % 9);
      auto e = std::make_unique<TensorEntry>();
      e->request.name = "t" + std::to_string(k);
      e->request.shape = {int64_t(counts[k])};
      e->input = in[k].data();
      e->output = out[r][k].data();
      Response resp;
      static_cast<TensorSpec&>(resp) = e->request;
      resp.reduce_op = ReduceOp::Sum;
      resp.compression = k == 3 ? Compression::FP16 : Compression::None;
      exec.add(resp, r == 2 ? nullptr : e.get());
      entries.push_back(std::move(e));
    }
    exec.flush();
    CHECK_EQ(completed, r == 2 ? 0 : int(counts.size()));
  });
  for (int r = 0; r < 2; ++r) {
    for (size_t k = 0; k < counts.size(); ++k) {
      for (size_t i = 0; i < counts[k]; ++i) CHECK_EQ(out[r][k][i], 3.0f * float((i + k) % 9));
    }
  }
}

}  // namespace
}  // namespace hvdlite
