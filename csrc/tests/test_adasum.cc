// Adasum (algorithms/adasum.h) at 1, 2, 4 and 8 ranks over the loopback transport, for
// float16, bfloat16, float32 and float64, against a float64 reference of the paper's formula
// written here (a binary tree of pairwise combinations, as Horovod's own tests compute it);
// fused tensors against each tensor alone; Tensor Fusion's executor (packed, compressed and
// joined members); and the rank counts it refuses.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>

#include "algorithms/adasum.h"
#include "algorithms/half.h"
#include "algorithms/shm_allreduce.h"
#include "engine/fusion.h"
#include "harness.h"
#include "loopback.h"

namespace hvdlite {
namespace {

using testing::Fabric;
using testing::run_ranks;

// ---------------------------------------------------------------------------------------
// The reference, in float64 on the values each rank holds (already rounded to the dtype).

using Vec = std::vector<double>;

Vec reference_pair(const Vec& a, const Vec& b) {
  double dot = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const double tiny = std::sqrt(DBL_MIN);
  const double ca = aa >= tiny ? 1.0 - dot / (2.0 * aa) : 1.0;
  const double cb = bb >= tiny ? 1.0 - dot / (2.0 * bb) : 1.0;
  Vec out(a.size());
  for (size_t i = 0; i < a.size(); ++i) out[i] = ca * a[i] + cb * b[i];
  return out;
}

// Ranks 0+1, 2+3, ... then pairs of pairs: the tree Horovod's reference_tree_reduction builds.
Vec reference_tree(std::vector<Vec> v) {
  const size_t n = v.size();
  for (size_t step = 1; step < n; step *= 2) {
    for (size_t i = 0; i + step < n; i += 2 * step) v[i] = reference_pair(v[i], v[i + step]);
  }
  return v[0];
}

// ---------------------------------------------------------------------------------------
// The dtypes, as raw 16/32/64-bit values.

struct Codec {
  DataType dtype;
  size_t size;
  double eps;  // the dtype's machine epsilon
  void (*put)(void*, size_t, double);
  double (*get)(const void*, size_t);
};

const Codec kCodecs[] = {
    {DataType::Float16, 2, 9.765625e-4,
     [](void* p, size_t i, double v) { static_cast<uint16_t*>(p)[i] = float_to_fp16(float(v)); },
     [](const void* p, size_t i) { return double(fp16_to_float(static_cast<const uint16_t*>(p)[i])); }},
    {DataType::BFloat16, 2, 7.8125e-3,
     [](void* p, size_t i, double v) { static_cast<uint16_t*>(p)[i] = float_to_bf16(float(v)); },
     [](const void* p, size_t i) { return double(bf16_to_float(static_cast<const uint16_t*>(p)[i])); }},
    {DataType::Float32, 4, double(FLT_EPSILON),
     [](void* p, size_t i, double v) { static_cast<float*>(p)[i] = float(v); },
     [](const void* p, size_t i) { return double(static_cast<const float*>(p)[i]); }},
    {DataType::Float64, 8, DBL_EPSILON,
     [](void* p, size_t i, double v) { static_cast<double*>(p)[i] = v; },
     [](const void* p, size_t i) { return static_cast<const double*>(p)[i]; }},
};

// |got - want| / |want| over a tensor (norms), which is how Horovod's tests judge Adasum.
double relative_error(const Vec& got, const Vec& want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    diff += (got[i] - want[i]) * (got[i] - want[i]);
    norm += want[i] * want[i];
  }
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

// Tensors of these sizes, back to back: sizes that fall on both sides of every halving, an
// empty tensor, one element, and an all-zero tensor (index 4 on every rank).
const std::vector<size_t> kCounts = {37, 1, 1000, 0, 64, 7, 513};

double value(int rank, size_t tensor, size_t i, std::mt19937_64& gen) {
  if (tensor == 4) return 0.0;
  std::normal_distribution<double> normal(0.0, 1.0);
  // Correlated across ranks (a shared part) so coefficients are far from 1.
  return normal(gen) + 0.5 * std::sin(double(i + tensor)) * double(rank % 3 + 1);
}

struct Run {
  std::vector<std::vector<uint8_t>> bytes;  // per rank: the whole buffer after the all-reduce
  std::vector<std::vector<Vec>> inputs;     // per tensor, per rank: the rounded inputs
};

// Each rank's tensors, rounded to the dtype; `fused`: one all-reduce of them all, else one per
// tensor.
Run run_adasum(const Codec& c, int n, bool fused, double postscale = 1.0, bool shared = true) {
  size_t total = 0;
  for (size_t k : kCounts) total += k;
  Run run;
  run.bytes.assign(n, std::vector<uint8_t>(total * c.size));
  run.inputs.assign(kCounts.size(), std::vector<Vec>(n));
  for (int r = 0; r < n; ++r) {
    std::mt19937_64 gen(1000 + r);
    size_t at = 0;
    for (size_t k = 0; k < kCounts.size(); ++k) {
      for (size_t i = 0; i < kCounts[k]; ++i) {
        c.put(run.bytes[r].data(), at + i, value(r, k, i, gen));
        run.inputs[k][r].push_back(c.get(run.bytes[r].data(), at + i));
      }
      at += kCounts[k];
    }
  }
  Fabric fabric(n);
  run_ranks(n, [&](int r) {
    auto t = fabric.world(r);
    std::vector<uint8_t> scratch;
    if (fused) {
      adasum_allreduce(*t, run.bytes[r].data(), kCounts, c.dtype, postscale, scratch, shared);
      return;
    }
    size_t at = 0;
    for (size_t k : kCounts) {
      adasum_allreduce(*t, run.bytes[r].data() + at * c.size, {k}, c.dtype, postscale, scratch, shared);
      at += k;
    }
  });
  return run;
}

Vec tensor_of(const Codec& c, const std::vector<uint8_t>& bytes, size_t k) {
  size_t at = 0;
  for (size_t j = 0; j < k; ++j) at += kCounts[j];
  Vec v(kCounts[k]);
  for (size_t i = 0; i < v.size(); ++i) v[i] = c.get(bytes.data(), at + i);
  return v;
}

// Every dtype at 1, 2, 4 and 8 ranks: each tensor of a fused buffer matches the float64
// reference tree, and every rank holds the same bits.
TEST(adasum_matches_float64_reference) {
  for (const Codec& c : kCodecs) {
    for (int n : {1, 2, -2, 4, 8}) {  // -2: two ranks point to point
      const bool shared = n > 0;
      n = std::abs(n);
      Run run = run_adasum(c, n, /*fused=*/true, /*postscale=*/0.5, shared);
      for (int r = 1; r < n; ++r) CHECK(run.bytes[r] == run.bytes[0]);
      int levels = 0;
      while ((1 << levels) < n) ++levels;
      // Each level rounds its result to the dtype once (dot products stay in float64).
      const double tolerance = 4.0 * c.eps * double(levels + 1);
      for (size_t k = 0; k < kCounts.size(); ++k) {
        Vec want = reference_tree(run.inputs[k]);
        for (double& w : want) w *= 0.5;
        const Vec got = tensor_of(c, run.bytes[0], k);
        const double err = relative_error(got, want);
        if (!(err <= tolerance)) {
          throw testing::Failure(std::string(dtype_name(c.dtype)) + " at " + std::to_string(n) +
                                 " ranks, tensor " + std::to_string(k) + ": relative error " +
                                 std::to_string(err) + " > " + std::to_string(tolerance));
        }
        if (k == 4) {
          for (double g : got) CHECK_EQ(g, 0.0);  // zeros stay zeros
        }
      }
    }
  }
}

// Note [Adasum per tensor]: a fused buffer gives each tensor what it gets alone. Only the
// float64 partial sums of its dot product split differently, so results agree to the
// rounding of those sums (well inside one ulp of the dtype for most elements).
TEST(adasum_fused_equals_unfused) {
  for (const Codec& c : kCodecs) {
    for (int n : {2, 4, 8}) {
      Run fused = run_adasum(c, n, true), alone = run_adasum(c, n, false);
      for (size_t k = 0; k < kCounts.size(); ++k) {
        const Vec f = tensor_of(c, fused.bytes[0], k), a = tensor_of(c, alone.bytes[0], k);
        int levels = 0;
        while ((1 << levels) < n) ++levels;
        CHECK(relative_error(f, a) <= 4.0 * c.eps * double(levels + 1));
        // The coefficients are per tensor: a tensor's result never depends on its neighbours,
        // so it also matches its reference as closely as alone.
        const double ef = relative_error(f, reference_tree(fused.inputs[k]));
        const double ea = relative_error(a, reference_tree(alone.inputs[k]));
        CHECK(ef <= ea + 2.0 * c.eps);
      }
    }
  }
}

// Slices of several pieces (Note [Adasum pipeline]: 2 MiB), tensors cut by piece boundaries.
TEST(adasum_in_pieces_matches_reference) {
  const std::vector<size_t> counts = {1300001, 3, 700001};
  // At 2 ranks through the shared area's queues (Note [Adasum through shared memory]) and
  // point to point; at 4 point to point.
  for (auto [n, shared] : {std::pair{2, true}, std::pair{2, false}, std::pair{4, true}}) {
    std::vector<std::vector<float>> data(n);
    std::vector<std::vector<Vec>> inputs(counts.size(), std::vector<Vec>(n));
    for (int r = 0; r < n; ++r) {
      std::mt19937_64 gen(500 + r);
      std::normal_distribution<double> normal(0.0, 1.0);
      for (size_t k = 0; k < counts.size(); ++k) {
        for (size_t i = 0; i < counts[k]; ++i) {
          const float v = float(normal(gen) + std::cos(double(i)) * (r + 1));
          data[r].push_back(v);
          inputs[k][r].push_back(double(v));
        }
      }
    }
    Fabric fabric(n);
    run_ranks(n, [&](int r) {
      auto t = fabric.world(r);
      std::vector<uint8_t> scratch;
      CHECK(n != 2 || shm_allreduce_available(*t));  // the loopback has an area, as MPI
      adasum_allreduce(*t, data[r].data(), counts, DataType::Float32, 2.0, scratch, shared);
    });
    size_t at = 0;
    for (size_t k = 0; k < counts.size(); ++k) {
      Vec want = reference_tree(inputs[k]);
      Vec got(data[0].begin() + at, data[0].begin() + at + counts[k]);
      for (double& w : want) w *= 2.0;
      CHECK(relative_error(got, want) <= 1e-6);
      at += counts[k];
    }
    for (int r = 1; r < n; ++r) CHECK(data[r] == data[0]);
  }
}

// Horovod's characteristic cases: orthogonal vectors add, parallel ones average.
TEST(adasum_orthogonal_adds_parallel_averages) {
  const int n = 4;
  const size_t count = 16;
  std::vector<std::vector<double>> ortho(n, std::vector<double>(count, 0.0)), para(n);
  for (int r = 0; r < n; ++r) {
    ortho[r][r] = double(r + 1);  // unit directions, orthogonal
    for (size_t i = 0; i < count; ++i) para[r].push_back(double(i % 5) * 0.25);  // all equal
  }
  Fabric fabric(n);
  run_ranks(n, [&](int r) {
    auto t = fabric.world(r);
    std::vector<uint8_t> scratch;
    adasum_allreduce(*t, ortho[r].data(), {count}, DataType::Float64, 1.0, scratch);
    adasum_allreduce(*t, para[r].data(), {count}, DataType::Float64, 1.0, scratch);
  });
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) {
      CHECK_EQ(ortho[r][i], i < size_t(n) ? double(i + 1) : 0.0);
      CHECK(std::fabs(para[r][i] - double(i % 5) * 0.25) <= 1e-15);
    }
  }
}

// The pairwise kernel on one whole tensor, and a zero vector next to a non-zero one (the
// coefficient stays 1 where the norm is 0: the other vector passes unchanged).
TEST(adasum_combine_pair) {
  std::vector<float> a = {1, 2, 3}, b = {0, 0, 0};
  adasum_combine(a.data(), b.data(), 3, DataType::Float32);
  CHECK(a == std::vector<float>({1, 2, 3}));
  std::vector<double> x = {3, 0}, y = {3, 4};  // x.y = 9, |x|^2 = 9, |y|^2 = 25
  adasum_combine(x.data(), y.data(), 2, DataType::Float64);
  const double cx = 1 - 9.0 / 18.0, cy = 1 - 9.0 / 50.0;
  CHECK(std::fabs(x[0] - (cx * 3 + cy * 3)) < 1e-15 && std::fabs(x[1] - cy * 4) < 1e-15);
}

TEST(adasum_refuses_other_rank_counts_and_dtypes) {
  for (int n : {3, 5, 6}) {
    Fabric fabric(n);
    run_ranks(n, [&](int r) {
      auto t = fabric.world(r);
      std::vector<float> d(4, 1.0f);
      std::vector<uint8_t> scratch;
      CHECK_THROWS(adasum_allreduce(*t, d.data(), {4}, DataType::Float32, 1.0, scratch),
                   Status::InvalidArgument, "power-of-two number of ranks, not " + std::to_string(n));
    });
  }
  CHECK(adasum_rank_count_ok(1) && adasum_rank_count_ok(2) && adasum_rank_count_ok(64));
  CHECK(!adasum_rank_count_ok(0) && !adasum_rank_count_ok(12));
  Fabric fabric(2);
  run_ranks(2, [&](int r) {
    auto t = fabric.world(r);
    std::vector<int32_t> d(4, 1);
    std::vector<uint8_t> scratch;
    CHECK_THROWS(adasum_allreduce(*t, d.data(), {4}, DataType::Int32, 1.0, scratch),
                 Status::InvalidArgument, "Adasum does not support int32");
  });
}

// Tensor Fusion's executor on Adasum responses: several members packed in order, one large
// enough to go in place elsewhere, one compressed to float16 on the wire, prescale and
// postscale, and a joined rank's zeros (which leave the others' result as theirs alone).
TEST(adasum_through_fusion_executor) {
  const int n = 4;
  const std::vector<size_t> counts = {5, 20000, 33};
  Config config;
  config.fusion_threshold = 1 << 20;
  std::vector<std::vector<std::vector<float>>> in(n), out(n);
  Fabric fabric(n);
  run_ranks(n, [&](int r) {
    auto t = fabric.world(r);
    std::vector<std::unique_ptr<TensorEntry>> entries;
    in[r].resize(counts.size());
    out[r].resize(counts.size());
    int completed = 0;
    AllreduceExecutor exec(*t, config, [&](TensorEntry* e, Outcome o) {
      CHECK(o.status == Status::Success);
      ++completed;
    });
    std::mt19937_64 gen(77 + r);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (size_t k = 0; k < counts.size(); ++k) {
      for (size_t i = 0; i < counts[k]; ++i) in[r][k].push_back(float(normal(gen)));
      out[r][k].assign(counts[k], -1.0f);
      auto e = std::make_unique<TensorEntry>();
      e->request.name = "t" + std::to_string(k);
      e->request.shape = {int64_t(counts[k])};
      e->request.reduce_op = ReduceOp::Adasum;
      e->request.prescale = 2.0;
      e->request.postscale = 0.25;
      e->input = in[r][k].data();
      e->output = out[r][k].data();
      Response resp;
      static_cast<TensorSpec&>(resp) = e->request;
      resp.compression = k == 2 ? Compression::FP16 : Compression::None;
      exec.add(resp, r == 3 ? nullptr : e.get());  // rank 3 has joined
      entries.push_back(std::move(e));
    }
    exec.flush();
    CHECK_EQ(completed, r == 3 ? 0 : int(counts.size()));
  });
  for (size_t k = 0; k < counts.size(); ++k) {
    std::vector<Vec> inputs(n);
    for (int r = 0; r < n; ++r) {
      for (size_t i = 0; i < counts[k]; ++i) {
        double v = r == 3 ? 0.0 : double(in[r][k][i]) * 2.0;
        if (k == 2) v = double(fp16_to_float(float_to_fp16(float(v))));  // on the wire
        inputs[r].push_back(v);
      }
    }
    Vec want = reference_tree(inputs);
    for (double& w : want) w *= 0.25;
    for (int r = 0; r < 3; ++r) {
      CHECK(out[r][k] == out[0][k]);
      Vec got(out[r][k].begin(), out[r][k].end());
      CHECK(relative_error(got, want) <= (k == 2 ? 8e-3 : 1e-6));
    }
  }
}

}  // namespace
}  // namespace hvdlite
