// Min and Max propagate NaN (Note [NaN in Min and Max] in reduce.cc): on every all-reduce path
// (ring, exchange, shared memory, hierarchical) and the ring reduce-scatter, at 2 to 4 ranks,
// in float32, float64, float16 and bfloat16, a NaN at any one rank in any element comes out
// NaN in that element and nowhere else, bitwise identical on every rank.
#include <cmath>
#include <cstring>
#include <string>

#include "algorithms/exchange_allreduce.h"
#include "algorithms/half.h"
#include "algorithms/hierarchical.h"
#include "algorithms/reduce.h"
#include "algorithms/ring_allreduce.h"
#include "algorithms/shm_allreduce.h"
#include "harness.h"
#include "loopback.h"

namespace hvdlite {
namespace {

using testing::Fabric;
using testing::run_ranks;

constexpr DataType kFloats[] = {DataType::Float32, DataType::Float64, DataType::Float16,
                                DataType::BFloat16};

// Element i of a buffer of a floating dtype, as a double (NaN stays NaN), and back.
double get(const std::vector<uint8_t>& b, DataType t, size_t i) {
  const uint8_t* p = b.data() + i * dtype_size(t);
  uint16_t h;
  float f;
  double d;
  switch (t) {
    case DataType::Float16: std::memcpy(&h, p, 2); return fp16_to_float(h);
    case DataType::BFloat16: std::memcpy(&h, p, 2); return bf16_to_float(h);
    case DataType::Float32: std::memcpy(&f, p, 4); return f;
    default: std::memcpy(&d, p, 8); return d;
  }
}

void set(std::vector<uint8_t>& b, DataType t, size_t i, double v) {
  uint8_t* p = b.data() + i * dtype_size(t);
  const float f = static_cast<float>(v);
  uint16_t h;
  switch (t) {
    case DataType::Float16: h = float_to_fp16(f); std::memcpy(p, &h, 2); break;
    case DataType::BFloat16: h = float_to_bf16(f); std::memcpy(p, &h, 2); break;
    case DataType::Float32: std::memcpy(p, &f, 4); break;
    default: std::memcpy(p, &v, 8); break;
  }
}

// A quiet NaN of dtype t whose sign and payload depend on `tag`, so that ranks holding
// different NaNs would show if the result depended on which rank reduced it.
void set_nan(std::vector<uint8_t>& b, DataType t, size_t i, int tag) {
  uint8_t* p = b.data() + i * dtype_size(t);
  const bool negative = tag % 2 == 1;
  const uint64_t payload = static_cast<uint64_t>(tag) + 1;
  switch (t) {
    case DataType::Float16: {
      const uint16_t h = static_cast<uint16_t>((negative ? 0x8000u : 0u) | 0x7e00u | payload);
      std::memcpy(p, &h, 2);
      break;
    }
    case DataType::BFloat16: {
      const uint16_t h = static_cast<uint16_t>((negative ? 0x8000u : 0u) | 0x7fc0u | payload);
      std::memcpy(p, &h, 2);
      break;
    }
    case DataType::Float32: {
      const uint32_t u = (negative ? 0x80000000u : 0u) | 0x7fc00000u | static_cast<uint32_t>(payload);
      std::memcpy(p, &u, 4);
      break;
    }
    default: {
      const uint64_t u = (negative ? 0x8000000000000000ull : 0ull) | 0x7ff8000000000000ull | payload;
      std::memcpy(p, &u, 8);
      break;
    }
  }
}

enum class Path { Ring, Exchange, SharedMemory, Hierarchical, ReduceScatter };

const char* path_name(Path p) {
  switch (p) {
    case Path::Ring: return "ring";
    case Path::Exchange: return "exchange";
    case Path::SharedMemory: return "shared memory";
    case Path::Hierarchical: return "hierarchical";
    default: return "reduce-scatter";
  }
}

// Runs one collective of `in` (one buffer per rank) along `path`; returns each rank's buffer.
// For the reduce-scatter only rank r's segment r is meaningful: the others are zeroed.
std::vector<std::vector<uint8_t>> run(Path path, DataType t, ReduceOp op,
                                      std::vector<std::vector<uint8_t>> in) {
  const int n = static_cast<int>(in.size());
  const size_t es = dtype_size(t), count = in[0].size() / es;
  Fabric fabric(n, path == Path::Hierarchical ? 2 : 0);
  run_ranks(n, [&](int r) {
    auto tr = fabric.world(r);
    std::vector<uint8_t>& d = in[r];
    // Three spans (one empty) and pieces of 2 elements, so runs and pieces cut the data.
    const size_t first = std::min<size_t>(count, 3);
    SpanBuffer buf({{d.data(), first}, {nullptr, 0}, {d.data() + first * es, count - first}}, es);
    std::vector<uint8_t> scratch;
    switch (path) {
      case Path::Ring: ring_allreduce(*tr, buf, t, op, 1.0, scratch, 2 * es); break;
      case Path::Exchange: exchange_allreduce(*tr, buf, t, op, 1.0, scratch); break;
      case Path::SharedMemory:
        CHECK(shm_allreduce_available(*tr));
        shm_allreduce(*tr, buf, t, op, 1.0);
        break;
      case Path::Hierarchical: {
        Config config;
        config.hierarchical_allreduce = 1;
        config.hierarchical_chunk_bytes = 2 * es;
        auto h = make_hierarchy(*tr, config);
        CHECK(h != nullptr);
        hierarchical_allreduce(*h, buf, t, op, 1.0, scratch, 2 * es);
        break;
      }
      case Path::ReduceScatter: {
        const Segments segs = even_segments(count, n);
        ring_reduce_scatter(*tr, buf, segs, t, op, 1.0, scratch, 2 * es);
        std::vector<uint8_t> mine(d.size(), 0);
        std::memcpy(mine.data() + segs.offset[r] * es, d.data() + segs.offset[r] * es, segs.count[r] * es);
        d = mine;
        break;
      }
    }
  });
  return in;
}

// Checks every rank's result against the elementwise reduction of the inputs: NaN exactly
// where some rank had one, else the min/max; and the same bits on every rank (for the
// reduce-scatter: each segment's bits as the all-reduce of the same inputs gives them).
void check(Path path, DataType t, ReduceOp op, const std::vector<std::vector<uint8_t>>& in,
           const std::string& what) {
  const int n = static_cast<int>(in.size());
  const size_t es = dtype_size(t), count = in[0].size() / es;
  const auto out = run(path, t, op, in);
  const std::string where = std::string(path_name(path)) + ", " + std::to_string(n) + " ranks, " +
                            dtype_name(t) + (op == ReduceOp::Max ? " Max" : " Min") + ", " + what;
  std::vector<std::vector<uint8_t>> reference;
  if (path == Path::ReduceScatter) reference = run(Path::Ring, t, op, in);
  const Segments segs = even_segments(count, n);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) {
      if (path == Path::ReduceScatter && (i < segs.offset[r] || i >= segs.offset[r] + segs.count[r])) continue;
      bool any_nan = false;
      double m = op == ReduceOp::Max ? -INFINITY : INFINITY;
      for (int k = 0; k < n; ++k) {
        const double x = get(in[k], t, i);
        any_nan = any_nan || std::isnan(x);
        m = op == ReduceOp::Max ? std::max(m, x) : std::min(m, x);
      }
      const double got = get(out[r], t, i);
      const bool ok = any_nan ? std::isnan(got) : got == m;
      if (!ok) {
        throw testing::Failure(where + ": element " + std::to_string(i) + " on rank " + std::to_string(r) +
                               " is " + std::to_string(got) + ", expected " +
                               (any_nan ? std::string("nan") : std::to_string(m)));
      }
      const auto& same = path == Path::ReduceScatter ? reference[0] : out[0];
      if (std::memcmp(out[r].data() + i * es, same.data() + i * es, es) != 0) {
        throw testing::Failure(where + ": element " + std::to_string(i) + " on rank " + std::to_string(r) +
                               " differs bitwise from rank 0's");
      }
    }
  }
}

std::vector<std::vector<uint8_t>> distinct_values(int n, size_t count, DataType t) {
  std::vector<std::vector<uint8_t>> in(n, std::vector<uint8_t>(count * dtype_size(t)));
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) set(in[r], t, i, double((r * 7 + int(i) * 3) % 11) - 5.0);
  }
  return in;
}

void nan_matrix(Path path, int n) {
  const size_t count = 2 * n + 1;  // every rank's segment, and uneven ones
  for (DataType t : kFloats) {
    for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
      check(path, t, op, distinct_values(n, count, t), "no NaN");
      for (int k = 0; k < n; ++k) {
        for (size_t i = 0; i < count; ++i) {
          auto in = distinct_values(n, count, t);
          set_nan(in[k], t, i, k);
          check(path, t, op, in, "NaN at rank " + std::to_string(k) + " element " + std::to_string(i));
        }
        auto in = distinct_values(n, count, t);  // a whole tensor of NaN on one rank
        for (size_t i = 0; i < count; ++i) set_nan(in[k], t, i, k);
        check(path, t, op, in, "all NaN at rank " + std::to_string(k));
      }
      // Different NaNs (sign, payload) on every rank in one element, and +-inf beside them.
      auto in = distinct_values(n, count, t);
      for (int k = 0; k < n; ++k) {
        set_nan(in[k], t, 1, k);
        set(in[k], t, 0, k % 2 ? INFINITY : -INFINITY);
      }
      check(path, t, op, in, "a different NaN on every rank");
    }
  }
}

TEST(reduce_into_min_max_propagate_nan_in_operand_order) {
  for (DataType t : kFloats) {
    for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
      std::vector<uint8_t> d(4 * dtype_size(t)), s(d.size());
      set(d, t, 0, 1.0);       set(s, t, 0, 2.0);        // numbers: as before
      set_nan(d, t, 1, 0);     set(s, t, 1, 2.0);        // NaN first
      set(d, t, 2, 1.0);       set_nan(s, t, 2, 1);      // NaN second
      set_nan(d, t, 3, 2);     set_nan(s, t, 3, 3);      // two NaNs: the first one's bits
      std::vector<uint8_t> first_nan(d.begin() + 3 * dtype_size(t), d.end());
      reduce_into(d.data(), s.data(), 4, t, op);
      const std::string what = std::string(dtype_name(t)) + (op == ReduceOp::Max ? " Max" : " Min");
      if (get(d, t, 0) != (op == ReduceOp::Max ? 2.0 : 1.0)) throw testing::Failure(what + ": numbers");
      if (!std::isnan(get(d, t, 1)) || !std::isnan(get(d, t, 2))) throw testing::Failure(what + ": NaN lost");
      if (!std::isnan(get(d, t, 3))) throw testing::Failure(what + ": two NaNs");
      // float16/bfloat16 go through float32: the NaN comes back as the first operand's.
      if (std::memcmp(d.data() + 3 * dtype_size(t), first_nan.data(), dtype_size(t)) != 0) {
        throw testing::Failure(what + ": two NaNs give other bits than the first operand's");
      }
    }
  }
}

TEST(min_max_nan_ring_at_2_to_4_ranks) {
  for (int n = 2; n <= 4; ++n) nan_matrix(Path::Ring, n);
}

TEST(min_max_nan_exchange_at_2_to_4_ranks) {
  for (int n = 2; n <= 4; ++n) nan_matrix(Path::Exchange, n);
}

TEST(min_max_nan_shared_memory_at_2_ranks) { nan_matrix(Path::SharedMemory, 2); }

TEST(min_max_nan_hierarchical_at_4_ranks_on_2_hosts) { nan_matrix(Path::Hierarchical, 4); }

TEST(min_max_nan_reduce_scatter_at_2_to_4_ranks) {
  for (int n = 2; n <= 4; ++n) nan_matrix(Path::ReduceScatter, n);
}

}  // namespace
}  // namespace hvdlite
