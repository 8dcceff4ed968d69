#include "algorithms/adasum.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>

#include "algorithms/half_convert.h"
#include "algorithms/reduce.h"

namespace hvdlite {
namespace {

// ---------------------------------------------------------------------------------------
// Kernels: each tensor's dot product and squared norms, and the scaled addition.

struct DotNorms {
  double dot = 0, aa = 0, bb = 0;
};

// Four partial sums per quantity, so the loop is not one chain of dependent additions.
template <typename T>
DotNorms dot_norms_typed(const T* __restrict a, const T* __restrict b, size_t n) {
  double d[4] = {0, 0, 0, 0}, x[4] = {0, 0, 0, 0}, y[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) {
      const double av = static_cast<double>(a[i + k]), bv = static_cast<double>(b[i + k]);
      d[k] += av * bv;
      x[k] += av * av;
      y[k] += bv * bv;
    }
  }
  for (; i < n; ++i) {
    const double av = static_cast<double>(a[i]), bv = static_cast<double>(b[i]);
    d[0] += av * bv;
    x[0] += av * av;
    y[0] += bv * bv;
  }
  return {(d[0] + d[1]) + (d[2] + d[3]), (x[0] + x[1]) + (x[2] + x[3]), (y[0] + y[1]) + (y[2] + y[3])};
}

template <typename T>
void scaled_add_typed(T* __restrict a, const T* __restrict b, size_t n, double ca, double cb) {
  for (size_t i = 0; i < n; ++i) {
    a[i] = static_cast<T>(ca * static_cast<double>(a[i]) + cb * static_cast<double>(b[i]));
  }
}

// float16 / bfloat16: a block at a time through float32 (half_convert.h's bulk conversions).
constexpr size_t kHalfBlock = 1024;
using ToFloats = void (*)(float*, const uint16_t*, size_t);
using FromFloats = void (*)(uint16_t*, const float*, size_t, float);

DotNorms dot_norms_half(ToFloats to_floats, const uint16_t* a, const uint16_t* b, size_t n) {
  float fa[kHalfBlock], fb[kHalfBlock];
  DotNorms sum;
  for (size_t at = 0; at < n; at += kHalfBlock) {
    const size_t c = std::min(kHalfBlock, n - at);
    to_floats(fa, a + at, c);
    to_floats(fb, b + at, c);
    const DotNorms part = dot_norms_typed(fa, fb, c);
    sum.dot += part.dot;
    sum.aa += part.aa;
    sum.bb += part.bb;
  }
  return sum;
}

void scaled_add_half(ToFloats to_floats, FromFloats from_floats, uint16_t* a, const uint16_t* b,
                     size_t n, double ca, double cb) {
  float fa[kHalfBlock], fb[kHalfBlock];
  for (size_t at = 0; at < n; at += kHalfBlock) {
    const size_t c = std::min(kHalfBlock, n - at);
    to_floats(fa, a + at, c);
    to_floats(fb, b + at, c);
    scaled_add_typed(fa, fb, c, ca, cb);
    from_floats(a + at, fa, c, 1.0f);
  }
}

DotNorms dot_norms(const void* a, const void* b, size_t n, DataType dtype) {
  switch (dtype) {
    case DataType::Float32: return dot_norms_typed(static_cast<const float*>(a), static_cast<const float*>(b), n);
    case DataType::Float64: return dot_norms_typed(static_cast<const double*>(a), static_cast<const double*>(b), n);
    case DataType::Float16:
      return dot_norms_half(fp16_to_floats, static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), n);
    case DataType::BFloat16:
      return dot_norms_half(bf16_to_floats, static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), n);
    default: break;
  }
  throw Error(Status::InvalidArgument, std::string("Adasum does not support ") + dtype_name(dtype));
}

void scaled_add(void* a, const void* b, size_t n, DataType dtype, double ca, double cb) {
  switch (dtype) {
    case DataType::Float32:
      return scaled_add_typed(static_cast<float*>(a), static_cast<const float*>(b), n, ca, cb);
    case DataType::Float64:
      return scaled_add_typed(static_cast<double*>(a), static_cast<const double*>(b), n, ca, cb);
    case DataType::Float16:
      return scaled_add_half(fp16_to_floats, floats_to_fp16, static_cast<uint16_t*>(a),
                             static_cast<const uint16_t*>(b), n, ca, cb);
    case DataType::BFloat16:
      return scaled_add_half(bf16_to_floats, floats_to_bf16, static_cast<uint16_t*>(a),
                             static_cast<const uint16_t*>(b), n, ca, cb);
    default: break;
  }
  throw Error(Status::InvalidArgument, std::string("Adasum does not support ") + dtype_name(dtype));
}

// A vector's coefficient: 1 - dot / (2 |v|^2), or 1 when |v|^2 is too small to divide by
// (Horovod's threshold: sqrt(DBL_MIN), so a zero vector adds plainly).
double coefficient(double dot, double normsq) {
  static const double kTiny = std::sqrt(DBL_MIN);
  return normsq >= kTiny ? 1.0 - dot / normsq * 0.5 : 1.0;
}

// ---------------------------------------------------------------------------------------
// Communication

constexpr size_t kMaxPieceBytes = size_t(1) << 30;  // a transport's pieces stay under 2 GiB

// Sends send_bytes and receives recv_bytes with `peer` at once (the peer does the mirror
// image, so both cut their messages alike).
void swap_with(Transport& t, const char* send, size_t send_bytes, char* recv, size_t recv_bytes, int peer) {
  for (size_t at = 0; at < std::max(send_bytes, recv_bytes); at += kMaxPieceBytes) {
    if (at < recv_bytes) t.post_recv(recv + at, std::min(kMaxPieceBytes, recv_bytes - at), peer);
    if (at < send_bytes) t.post_send(send + at, std::min(kMaxPieceBytes, send_bytes - at), peer);
  }
  t.wait_all();
}

// Sums `values` over the `group` ranks (a power of two) whose ranks differ from this one only
// in the low bits, by recursive doubling: each step adds the same two partials on both sides,
// so every member ends with the same bits (Note [Adasum per tensor]).
void sum_over_group(Transport& t, std::vector<double>& values, std::vector<double>& theirs, int group) {
  const size_t bytes = values.size() * sizeof(double);
  theirs.resize(values.size());
  for (int d = 1; d < group; d <<= 1) {
    swap_with(t, reinterpret_cast<const char*>(values.data()), bytes,
              reinterpret_cast<char*>(theirs.data()), bytes, t.rank() ^ d);
    for (size_t i = 0; i < values.size(); ++i) values[i] += theirs[i];
  }
}

// One level's combination on this rank's slice: `a` (its own data) and `b` (the peer's for
// the same elements), tensor by tensor (`counts`: each tensor's elements in the slice).
// The sums over the group put the left (lower) half's norm first, whichever side this is.
void combine_slice(Transport& t, char* a, const char* b, const std::vector<size_t>& counts,
                   DataType dtype, bool left, int group, std::vector<double>& sums,
                   std::vector<double>& theirs) {
  const size_t es = dtype_size(dtype);
  sums.assign(3 * counts.size(), 0.0);
  size_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const DotNorms p = dot_norms(a + at * es, b + at * es, counts[i], dtype);
    sums[3 * i] = p.dot;
    sums[3 * i + 1] = left ? p.aa : p.bb;
    sums[3 * i + 2] = left ? p.bb : p.aa;
    at += counts[i];
  }
  sum_over_group(t, sums, theirs, group);
  at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    const double dot = sums[3 * i];
    const double left_normsq = sums[3 * i + 1], right_normsq = sums[3 * i + 2];
    const double mine = coefficient(dot, left ? left_normsq : right_normsq);
    const double peers = coefficient(dot, left ? right_normsq : left_normsq);
    if (counts[i] > 0) scaled_add(a + at * es, b + at * es, counts[i], dtype, mine, peers);
    at += counts[i];
  }
}

}  // namespace

bool adasum_supports(DataType dtype) {
  return dtype == DataType::Float16 || dtype == DataType::BFloat16 || dtype == DataType::Float32 ||
         dtype == DataType::Float64;
}

void adasum_combine(void* a, const void* b, size_t count, DataType dtype) {
  const DotNorms p = dot_norms(a, b, count, dtype);
  scaled_add(a, b, count, dtype, coefficient(p.dot, p.aa), coefficient(p.dot, p.bb));
}

void adasum_allreduce(Transport& t, void* data, const std::vector<size_t>& counts, DataType dtype,
                      double postscale, std::vector<uint8_t>& scratch) {
  const int n = t.size(), rank = t.rank();
  if (!adasum_supports(dtype)) {
    throw Error(Status::InvalidArgument, std::string("Adasum does not support ") + dtype_name(dtype) +
                " (float16, bfloat16, float32 and float64 only)");
  }
  if (!adasum_rank_count_ok(n)) {
    throw Error(Status::InvalidArgument, "Adasum needs a power-of-two number of ranks, not " + std::to_string(n));
  }
  const size_t es = dtype_size(dtype);
  size_t total = 0;
  for (size_t c : counts) total += c;
  if (total == 0) return;
  if (scratch.size() < total * es) scratch.resize(total * es);

  // Halving (reduce-scatter): at each level this rank keeps one half of what it holds and
  // combines it with its peer's copy of that half. `mine[i]`: tensor i's elements in this
  // rank's slice; `given[level][i]`: those it gave its peer at that level (for the way back).
  std::vector<size_t> mine = counts;
  std::vector<std::vector<size_t>> given;
  std::vector<double> sums, theirs;
  char* grad = static_cast<char*>(data);
  char* recv = reinterpret_cast<char*>(scratch.data());
  size_t held = total;
  for (int level = 1; level < n; level <<= 1) {
    const int peer = rank ^ level;
    const bool left = (rank & level) == 0;  // the left keeps the first half
    const size_t first_half = held / 2, second_half = held - first_half;
    const size_t keep = left ? first_half : second_half, give = held - keep;
    // Which tensors' elements fall in the half given away: the split falls at `first_half`
    // elements into the slice, wherever tensor boundaries are.
    std::vector<size_t> gave(mine.size(), 0);
    size_t before = 0;  // elements of the slice before tensor i
    for (size_t i = 0; i < mine.size(); ++i) {
      const size_t lo = before, hi = before + mine[i];
      const size_t in_first = hi <= first_half ? mine[i] : (lo >= first_half ? 0 : first_half - lo);
      const size_t in_second = mine[i] - in_first;
      gave[i] = left ? in_second : in_first;
      mine[i] = left ? in_first : in_second;
      before = hi;
    }
    given.push_back(std::move(gave));
    const size_t send_at = left ? keep : 0;   // elements into the slice
    const size_t recv_at = left ? 0 : give;
    swap_with(t, grad + send_at * es, give * es, recv + recv_at * es, keep * es, peer);
    if (!left) {
      grad += give * es;
      recv += give * es;
    }
    held = keep;
    combine_slice(t, grad, recv, mine, dtype, left, 2 * level, sums, theirs);
  }

  // This rank's slice is final: scale it once, here, by its owner.
  if (postscale != 1.0) copy_scaled(grad, grad, held, dtype, postscale);

  // Doubling (all-gather): the way back, level by level, each rank swapping its slice for
  // the part its peer kept.
  for (int level = n >> 1; level > 0; level >>= 1) {
    const int peer = rank ^ level;
    const bool left = (rank & level) == 0;
    const std::vector<size_t>& gave = given.back();
    size_t back = 0;
    for (size_t i = 0; i < mine.size(); ++i) {
      back += gave[i];
      mine[i] += gave[i];
    }
    char* into = left ? grad + held * es : grad - back * es;
    swap_with(t, grad, held * es, into, back * es, peer);
    if (!left) grad -= back * es;
    held += back;
    given.pop_back();
  }
}

}  // namespace hvdlite
