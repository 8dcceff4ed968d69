#include "algorithms/adasum.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>
#include <utility>

#include "algorithms/half_convert.h"
#include "algorithms/reduce.h"
#include "algorithms/shm_allreduce.h"
#include "algorithms/shm_port.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

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

// Note [Adasum kernels]
// The kernels are what Adasum costs beyond a Sum's memory traffic: per element of a level, a
// dot product and two norms in float64 and a scaled addition. Compiled for the x86-64
// baseline (SSE2) they ran at about a third of the memory's speed, so on CPUs with AVX2 and
// FMA (checked at run time, as half_convert.cc checks F16C) versions written for them run
// instead: four float64 lanes per instruction, the products fused into the sums. Which runs
// changes only how each rank's partial sums are rounded; the group's sums (and every
// element, computed once by its owner) stay the same on every rank.
#if defined(__x86_64__) || defined(__i386__)
bool has_avx2_fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

__attribute__((target("avx2,fma"))) double sum_lanes(__m256d v) {
  __m128d lo = _mm256_castpd256_pd128(v), hi = _mm256_extractf128_pd(v, 1);
  lo = _mm_add_pd(lo, hi);
  return _mm_cvtsd_f64(_mm_add_sd(lo, _mm_unpackhi_pd(lo, lo)));
}

__attribute__((target("avx2,fma"))) DotNorms dot_norms_avx2(const float* a, const float* b, size_t n) {
  __m256d d0 = _mm256_setzero_pd(), d1 = d0, x0 = d0, x1 = d0, y0 = d0, y1 = d0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 av = _mm256_loadu_ps(a + i), bv = _mm256_loadu_ps(b + i);
    const __m256d alo = _mm256_cvtps_pd(_mm256_castps256_ps128(av));
    const __m256d ahi = _mm256_cvtps_pd(_mm256_extractf128_ps(av, 1));
    const __m256d blo = _mm256_cvtps_pd(_mm256_castps256_ps128(bv));
    const __m256d bhi = _mm256_cvtps_pd(_mm256_extractf128_ps(bv, 1));
    d0 = _mm256_fmadd_pd(alo, blo, d0);
    d1 = _mm256_fmadd_pd(ahi, bhi, d1);
    x0 = _mm256_fmadd_pd(alo, alo, x0);
    x1 = _mm256_fmadd_pd(ahi, ahi, x1);
    y0 = _mm256_fmadd_pd(blo, blo, y0);
    y1 = _mm256_fmadd_pd(bhi, bhi, y1);
  }
  const DotNorms tail = dot_norms_typed(a + i, b + i, n - i);
  return {sum_lanes(_mm256_add_pd(d0, d1)) + tail.dot, sum_lanes(_mm256_add_pd(x0, x1)) + tail.aa,
          sum_lanes(_mm256_add_pd(y0, y1)) + tail.bb};
}

__attribute__((target("avx2,fma"))) DotNorms dot_norms_avx2(const double* a, const double* b, size_t n) {
  __m256d d0 = _mm256_setzero_pd(), d1 = d0, x0 = d0, x1 = d0, y0 = d0, y1 = d0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256d a0 = _mm256_loadu_pd(a + i), a1 = _mm256_loadu_pd(a + i + 4);
    const __m256d b0 = _mm256_loadu_pd(b + i), b1 = _mm256_loadu_pd(b + i + 4);
    d0 = _mm256_fmadd_pd(a0, b0, d0);
    d1 = _mm256_fmadd_pd(a1, b1, d1);
    x0 = _mm256_fmadd_pd(a0, a0, x0);
    x1 = _mm256_fmadd_pd(a1, a1, x1);
    y0 = _mm256_fmadd_pd(b0, b0, y0);
    y1 = _mm256_fmadd_pd(b1, b1, y1);
  }
  const DotNorms tail = dot_norms_typed(a + i, b + i, n - i);
  return {sum_lanes(_mm256_add_pd(d0, d1)) + tail.dot, sum_lanes(_mm256_add_pd(x0, x1)) + tail.aa,
          sum_lanes(_mm256_add_pd(y0, y1)) + tail.bb};
}

// a = ca * a + cb * b in float64, rounded once to float32.
__attribute__((target("avx2,fma"))) void scaled_add_avx2(float* a, const float* b, size_t n, double ca, double cb) {
  const __m256d ca4 = _mm256_set1_pd(ca), cb4 = _mm256_set1_pd(cb);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 av = _mm256_loadu_ps(a + i), bv = _mm256_loadu_ps(b + i);
    const __m256d lo = _mm256_fmadd_pd(ca4, _mm256_cvtps_pd(_mm256_castps256_ps128(av)),
                                       _mm256_mul_pd(cb4, _mm256_cvtps_pd(_mm256_castps256_ps128(bv))));
    const __m256d hi = _mm256_fmadd_pd(ca4, _mm256_cvtps_pd(_mm256_extractf128_ps(av, 1)),
                                       _mm256_mul_pd(cb4, _mm256_cvtps_pd(_mm256_extractf128_ps(bv, 1))));
    _mm256_storeu_ps(a + i, _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo)));
  }
  scaled_add_typed(a + i, b + i, n - i, ca, cb);
}

__attribute__((target("avx2,fma"))) void scaled_add_avx2(double* a, const double* b, size_t n, double ca, double cb) {
  const __m256d ca4 = _mm256_set1_pd(ca), cb4 = _mm256_set1_pd(cb);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d av = _mm256_loadu_pd(a + i), bv = _mm256_loadu_pd(b + i);
    _mm256_storeu_pd(a + i, _mm256_fmadd_pd(ca4, av, _mm256_mul_pd(cb4, bv)));
  }
  scaled_add_typed(a + i, b + i, n - i, ca, cb);
}
#else
bool has_avx2_fma() { return false; }
template <typename T>
DotNorms dot_norms_avx2(const T* a, const T* b, size_t n) { return dot_norms_typed(a, b, n); }
template <typename T>
void scaled_add_avx2(T* a, const T* b, size_t n, double ca, double cb) { scaled_add_typed(a, b, n, ca, cb); }
#endif

template <typename T>
DotNorms dot_norms_fast(const T* a, const T* b, size_t n) {
  return has_avx2_fma() ? dot_norms_avx2(a, b, n) : dot_norms_typed(a, b, n);
}

template <typename T>
void scaled_add_fast(T* a, const T* b, size_t n, double ca, double cb) {
  if (has_avx2_fma()) scaled_add_avx2(a, b, n, ca, cb);
  else scaled_add_typed(a, b, n, ca, cb);
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
    const DotNorms part = dot_norms_fast(fa, fb, c);
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
    scaled_add_fast(fa, fb, c, ca, cb);
    from_floats(a + at, fa, c, 1.0f);
  }
}

DotNorms dot_norms(const void* a, const void* b, size_t n, DataType dtype) {
  switch (dtype) {
    case DataType::Float32: return dot_norms_fast(static_cast<const float*>(a), static_cast<const float*>(b), n);
    case DataType::Float64: return dot_norms_fast(static_cast<const double*>(a), static_cast<const double*>(b), n);
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
      return scaled_add_fast(static_cast<float*>(a), static_cast<const float*>(b), n, ca, cb);
    case DataType::Float64:
      return scaled_add_fast(static_cast<double*>(a), static_cast<const double*>(b), n, ca, cb);
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

// Note [Adasum pipeline]
// Each level's exchange goes in pieces of kPieceBytes, all posted at once; the partial dot
// products and norms of a piece are computed as soon as it has landed, while the next ones
// are still on their way. At the last level (the peer of the last halving is also the first
// peer of the way back) each piece of this rank's final slice is sent back as soon as it is
// combined and scaled, while the next piece is computed. Pieces are cut alike on both sides
// (the same constant, the same counts), so sends and receives match one to one. This changes
// no value: only the order in which a tensor's partial sums are added.
constexpr size_t kPieceBytes = size_t(2) << 20;

// Calls fn(tensor, lo, hi) for each tensor's elements in [begin, end) of a slice holding
// tensors of `counts` elements back to back (positions within the slice).
template <typename F>
void for_each_tensor_in(const std::vector<size_t>& counts, size_t begin, size_t end, F&& fn) {
  size_t at = 0;
  for (size_t i = 0; i < counts.size() && at < end; ++i) {
    const size_t lo = std::max(at, begin), hi = std::min(at + counts[i], end);
    if (lo < hi) fn(i, lo, hi);
    at += counts[i];
  }
}

// Adds the partial dot products and norms of elements [begin, end) of the slice to `sums`
// (per tensor: dot, the left half's norm, the right half's, whichever side this rank is).
void add_partial_sums(const char* a, const char* b, const std::vector<size_t>& counts,
                      DataType dtype, bool left, size_t begin, size_t end, std::vector<double>& sums) {
  const size_t es = dtype_size(dtype);
  for_each_tensor_in(counts, begin, end, [&](size_t i, size_t lo, size_t hi) {
    const DotNorms p = dot_norms(a + lo * es, b + lo * es, hi - lo, dtype);
    sums[3 * i] += p.dot;
    sums[3 * i + 1] += left ? p.aa : p.bb;
    sums[3 * i + 2] += left ? p.bb : p.aa;
  });
}

// Each tensor's two coefficients, (this rank's, the peer's), from the group's sums.
std::vector<std::pair<double, double>> coefficients(const std::vector<double>& sums, bool left) {
  std::vector<std::pair<double, double>> out(sums.size() / 3);
  for (size_t i = 0; i < out.size(); ++i) {
    const double dot = sums[3 * i], left_normsq = sums[3 * i + 1], right_normsq = sums[3 * i + 2];
    out[i] = {coefficient(dot, left ? left_normsq : right_normsq),
              coefficient(dot, left ? right_normsq : left_normsq)};
  }
  return out;
}

// a = mine * a + peers * b over elements [begin, end) of the slice, tensor by tensor.
void combine_range(char* a, const char* b, const std::vector<size_t>& counts, DataType dtype,
                   const std::vector<std::pair<double, double>>& coeffs, size_t begin, size_t end) {
  const size_t es = dtype_size(dtype);
  for_each_tensor_in(counts, begin, end, [&](size_t i, size_t lo, size_t hi) {
    scaled_add(a + lo * es, b + lo * es, hi - lo, dtype, coeffs[i].first, coeffs[i].second);
  });
}

// Which of each tensor's elements fall in [begin, begin + count) of a buffer holding tensors
// of `counts` elements back to back.
std::vector<size_t> counts_within(const std::vector<size_t>& counts, size_t begin, size_t count) {
  std::vector<size_t> out(counts.size(), 0);
  for_each_tensor_in(counts, begin, begin + count, [&](size_t i, size_t lo, size_t hi) { out[i] = hi - lo; });
  return out;
}

// Note [Adasum through shared memory]
// Two ranks on one host: the one level's exchange and the way back go through the shared
// area's queues (shm_allreduce.h's two-rank halves) instead of point-to-point messages, which
// through MPI's shared-memory transport cost several times the copy. Rank 0 keeps the first
// half (rounded down), rank 1 the rest, as in the general case. The exchange is the queues'
// all-gather half over a buffer made of spans: segment 0 is what rank 0 gives (its second
// half), segment 1 what rank 1 gives (its first half); each rank's own segment points at the
// half it gives, the other at its scratch, so the queues copy each given half straight into
// the peer's scratch. Then the combination (the same kernels, in float64), and the all-gather
// half again, over the buffer itself, puts each rank's final half into the other's buffer.
void adasum_two_ranks_shared(Transport& t, char* data, const std::vector<size_t>& counts, size_t total,
                             DataType dtype, double postscale, std::vector<uint8_t>& scratch) {
  const int me = t.rank();
  const bool left = me == 0;
  const size_t es = dtype_size(dtype);
  const size_t first_half = total / 2, second_half = total - first_half;
  const size_t keep = left ? first_half : second_half;
  char* own = data + (left ? 0 : first_half) * es;
  char* peers = reinterpret_cast<char*>(scratch.data());
  Segments given;  // segment r: what rank r gives
  given.offset = {0, second_half};
  given.count = {second_half, first_half};
  const std::vector<Span> spans = left ? std::vector<Span>{{data + first_half * es, second_half}, {peers, first_half}}
                                       : std::vector<Span>{{peers, second_half}, {data, first_half}};
  const ShmPort port = ShmPort::of(t);
  shm_two_ranks(port, SpanBuffer(spans, es), given, dtype, ReduceOp::Sum, 1.0, Halves{false, true});
  const std::vector<size_t> mine = counts_within(counts, left ? 0 : first_half, keep);
  std::vector<double> sums(3 * counts.size(), 0.0), theirs;
  add_partial_sums(own, peers, mine, dtype, left, 0, keep, sums);
  sum_over_group(t, sums, theirs, 2);
  combine_range(own, peers, mine, dtype, coefficients(sums, left), 0, keep);
  if (postscale != 1.0) copy_scaled(own, own, keep, dtype, postscale);
  Segments kept;  // segment r: what rank r keeps
  kept.offset = {0, first_half};
  kept.count = {first_half, second_half};
  shm_two_ranks(port, SpanBuffer({{data, total}}, es), kept, dtype, ReduceOp::Sum, 1.0, Halves{false, true});
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
                      double postscale, std::vector<uint8_t>& scratch, bool shared_memory) {
  const int n = t.size(), rank = t.rank();
  if (!adasum_supports(dtype)) {
    throw Error(Status::InvalidArgument, std::string("Adasum does not support ") + dtype_name(dtype) +
                " (float16, bfloat16, float32 and float64 only)");
  }
  if (!adasum_rank_count_ok(n)) {
    throw Error(Status::InvalidArgument, "Adasum needs a power-of-two number of ranks, not " + std::to_string(n));
  }
  const size_t es = dtype_size(dtype);
  const size_t piece = std::max<size_t>(1, kPieceBytes / es);  // elements
  size_t total = 0;
  for (size_t c : counts) total += c;
  if (total == 0) return;
  if (n == 1) {
    if (postscale != 1.0) copy_scaled(data, data, total, dtype, postscale);
    return;
  }
  if (scratch.size() < total * es) scratch.resize(total * es);
  if (shared_memory && n == 2 && shm_allreduce_available(t)) {
    return adasum_two_ranks_shared(t, static_cast<char*>(data), counts, total, dtype, postscale, scratch);
  }

  // Halving (reduce-scatter): at each level this rank keeps one half of what it holds and
  // combines it with its peer's copy of that half. `mine[i]`: tensor i's elements in this
  // rank's slice; `given[level][i]`: those it gave its peer at that level (for the way back).
  std::vector<size_t> mine = counts;
  std::vector<std::vector<size_t>> given;
  std::vector<double> sums, theirs;
  std::vector<int> landing;
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
    // The exchange, in pieces (Note [Adasum pipeline]).
    char* kept = grad + (left ? 0 : give) * es;
    char* theirs_of_kept = recv + (left ? 0 : give) * es;
    const char* sent = grad + (left ? keep : 0) * es;
    landing.clear();
    for (size_t at = 0; at < std::max(keep, give); at += piece) {
      if (at < keep) landing.push_back(t.post_recv(theirs_of_kept + at * es, std::min(piece, keep - at) * es, peer));
      if (at < give) t.post_send(sent + at * es, std::min(piece, give - at) * es, peer);
    }
    grad = kept;
    recv = theirs_of_kept;
    held = keep;
    sums.assign(3 * mine.size(), 0.0);
    for (size_t k = 0; k < landing.size(); ++k) {
      t.wait(landing[k]);
      add_partial_sums(grad, recv, mine, dtype, left, k * piece, std::min(held, (k + 1) * piece), sums);
    }
    t.wait_all();  // this level's sends
    sum_over_group(t, sums, theirs, 2 * level);
    const auto coeffs = coefficients(sums, left);
    if (2 * level < n) {
      combine_range(grad, recv, mine, dtype, coeffs, 0, held);
      continue;
    }
    // The last level: this rank's slice is final. Each piece, combined and scaled once, here,
    // by its owner, goes back to the peer at once: the first step of the way back.
    const std::vector<size_t>& back_counts = given.back();
    size_t back = 0;
    for (size_t c : back_counts) back += c;
    char* into = left ? grad + held * es : grad - back * es;
    for (size_t at = 0; at < back; at += piece) t.post_recv(into + at * es, std::min(piece, back - at) * es, peer);
    for (size_t at = 0; at < held; at += piece) {
      const size_t end = std::min(held, at + piece);
      combine_range(grad, recv, mine, dtype, coeffs, at, end);
      if (postscale != 1.0) copy_scaled(grad + at * es, grad + at * es, end - at, dtype, postscale);
      t.post_send(grad + at * es, (end - at) * es, peer);
    }
    t.wait_all();
    for (size_t i = 0; i < mine.size(); ++i) mine[i] += back_counts[i];
    if (!left) grad -= back * es;
    held += back;
    given.pop_back();
  }

  // Doubling (all-gather), the rest of the way back, level by level, each rank swapping what
  // it holds for what its peer holds.
  for (int level = n >> 2; level > 0; level >>= 1) {
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
