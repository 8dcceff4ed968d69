#include "algorithms/adasum.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "algorithms/cpu_features.h"
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

// Four partial sums per quantity, so the loop is not one chain of dependent additions. In
// three parts so that a tensor can be fed in pieces (DotNormsStream below) with the same
// arithmetic as in one call: groups of four elements into the partial sums, then the last
// (fewer than four) elements into the first ones, then the partial sums added up. Never
// inlined: as the AVX2 kernels' tail too it stays compiled for the baseline (no FMA
// contraction), whichever function calls it.
struct TypedSums {
  double d[4] = {0, 0, 0, 0}, x[4] = {0, 0, 0, 0}, y[4] = {0, 0, 0, 0};
};

template <typename T>
__attribute__((noinline)) void dot_norms_typed_groups(const T* __restrict a, const T* __restrict b, size_t n,
                                                      TypedSums& s) {
  double d[4], x[4], y[4];
  for (int k = 0; k < 4; ++k) d[k] = s.d[k], x[k] = s.x[k], y[k] = s.y[k];
  for (size_t i = 0; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) {
      const double av = static_cast<double>(a[i + k]), bv = static_cast<double>(b[i + k]);
      d[k] += av * bv;
      x[k] += av * av;
      y[k] += bv * bv;
    }
  }
  for (int k = 0; k < 4; ++k) s.d[k] = d[k], s.x[k] = x[k], s.y[k] = y[k];
}

template <typename T>
__attribute__((noinline)) DotNorms dot_norms_typed_finish(const T* __restrict a, const T* __restrict b, size_t n,
                                                          TypedSums s) {
  for (size_t i = 0; i < n; ++i) {
    const double av = static_cast<double>(a[i]), bv = static_cast<double>(b[i]);
    s.d[0] += av * bv;
    s.x[0] += av * av;
    s.y[0] += bv * bv;
  }
  return {(s.d[0] + s.d[1]) + (s.d[2] + s.d[3]), (s.x[0] + s.x[1]) + (s.x[2] + s.x[3]),
          (s.y[0] + s.y[1]) + (s.y[2] + s.y[3])};
}

template <typename T>
DotNorms dot_norms_typed(const T* a, const T* b, size_t n) {
  TypedSums s;
  const size_t whole = n / 4 * 4;
  dot_norms_typed_groups(a, b, whole, s);
  return dot_norms_typed_finish(a + whole, b + whole, n - whole, s);
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
bool has_avx2_fma() { return cpu_features().avx2 && cpu_features().fma; }  // Note [CPU features at run time]

// The loops also ask for their operands 4 KiB ahead, once per iteration: the hardware's own
// prefetch left the dot products' loop waiting on memory a fifth of its time (2.5 against
// 2.0 ms for 32 MiB of float32 on the 2-core development machine). No value changes.
constexpr size_t kPrefetchBytes = 4096;

inline void prefetch_ahead(const void* a, const void* b) {
  _mm_prefetch(static_cast<const char*>(a) + kPrefetchBytes, _MM_HINT_T0);
  _mm_prefetch(static_cast<const char*>(b) + kPrefetchBytes, _MM_HINT_T0);
}

__attribute__((target("avx2,fma"))) double sum_lanes(__m256d v) {
  __m128d lo = _mm256_castpd256_pd128(v), hi = _mm256_extractf128_pd(v, 1);
  lo = _mm_add_pd(lo, hi);
  return _mm_cvtsd_f64(_mm_add_sd(lo, _mm_unpackhi_pd(lo, lo)));
}

// The AVX2 kernels' six accumulators (dot, |a|^2, |b|^2; elements 0-3 and 4-7 of each group
// of eight), kept in memory between the pieces of a tensor (DotNormsStream).
struct alignas(32) Avx2Sums {
  double v[6][4] = {};
};

__attribute__((target("avx2,fma"))) void dot_norms_avx2_groups(const float* a, const float* b, size_t n,
                                                              Avx2Sums& s) {
  __m256d d0 = _mm256_load_pd(s.v[0]), d1 = _mm256_load_pd(s.v[1]), x0 = _mm256_load_pd(s.v[2]),
          x1 = _mm256_load_pd(s.v[3]), y0 = _mm256_load_pd(s.v[4]), y1 = _mm256_load_pd(s.v[5]);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    prefetch_ahead(a + i, b + i);
    // Four floats per load, straight into the conversion (no lane extraction): the same
    // values as one 256-bit load split in two; 8 M pairs in cache 1.34 -> 1.18 ms.
    const __m256d alo = _mm256_cvtps_pd(_mm_loadu_ps(a + i)), ahi = _mm256_cvtps_pd(_mm_loadu_ps(a + i + 4));
    const __m256d blo = _mm256_cvtps_pd(_mm_loadu_ps(b + i)), bhi = _mm256_cvtps_pd(_mm_loadu_ps(b + i + 4));
    d0 = _mm256_fmadd_pd(alo, blo, d0);
    d1 = _mm256_fmadd_pd(ahi, bhi, d1);
    x0 = _mm256_fmadd_pd(alo, alo, x0);
    x1 = _mm256_fmadd_pd(ahi, ahi, x1);
    y0 = _mm256_fmadd_pd(blo, blo, y0);
    y1 = _mm256_fmadd_pd(bhi, bhi, y1);
  }
  _mm256_store_pd(s.v[0], d0), _mm256_store_pd(s.v[1], d1), _mm256_store_pd(s.v[2], x0);
  _mm256_store_pd(s.v[3], x1), _mm256_store_pd(s.v[4], y0), _mm256_store_pd(s.v[5], y1);
}

__attribute__((target("avx2,fma"))) void dot_norms_avx2_groups(const double* a, const double* b, size_t n,
                                                              Avx2Sums& s) {
  __m256d d0 = _mm256_load_pd(s.v[0]), d1 = _mm256_load_pd(s.v[1]), x0 = _mm256_load_pd(s.v[2]),
          x1 = _mm256_load_pd(s.v[3]), y0 = _mm256_load_pd(s.v[4]), y1 = _mm256_load_pd(s.v[5]);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    prefetch_ahead(a + i, b + i);  // a cache line of each per group
    const __m256d a0 = _mm256_loadu_pd(a + i), a1 = _mm256_loadu_pd(a + i + 4);
    const __m256d b0 = _mm256_loadu_pd(b + i), b1 = _mm256_loadu_pd(b + i + 4);
    d0 = _mm256_fmadd_pd(a0, b0, d0);
    d1 = _mm256_fmadd_pd(a1, b1, d1);
    x0 = _mm256_fmadd_pd(a0, a0, x0);
    x1 = _mm256_fmadd_pd(a1, a1, x1);
    y0 = _mm256_fmadd_pd(b0, b0, y0);
    y1 = _mm256_fmadd_pd(b1, b1, y1);
  }
  _mm256_store_pd(s.v[0], d0), _mm256_store_pd(s.v[1], d1), _mm256_store_pd(s.v[2], x0);
  _mm256_store_pd(s.v[3], x1), _mm256_store_pd(s.v[4], y0), _mm256_store_pd(s.v[5], y1);
}

// The last (fewer than eight) elements through the baseline kernel, then everything added up.
template <typename T>
__attribute__((target("avx2,fma"))) DotNorms dot_norms_avx2_finish(const T* a, const T* b, size_t n,
                                                                  const Avx2Sums& s) {
  const DotNorms tail = dot_norms_typed(a, b, n);
  const double dot = sum_lanes(_mm256_add_pd(_mm256_load_pd(s.v[0]), _mm256_load_pd(s.v[1])));
  const double aa = sum_lanes(_mm256_add_pd(_mm256_load_pd(s.v[2]), _mm256_load_pd(s.v[3])));
  const double bb = sum_lanes(_mm256_add_pd(_mm256_load_pd(s.v[4]), _mm256_load_pd(s.v[5])));
  return {dot + tail.dot, aa + tail.aa, bb + tail.bb};
}

template <typename T>
DotNorms dot_norms_avx2(const T* a, const T* b, size_t n) {
  Avx2Sums s;
  const size_t whole = n / 8 * 8;
  dot_norms_avx2_groups(a, b, whole, s);
  return dot_norms_avx2_finish(a + whole, b + whole, n - whole, s);
}

// a = ca * a + cb * b in float64, rounded once to float32. Four floats at a time, loaded
// and stored as 128 bits (no lane extraction or insertion): 2.9 -> 2.4 ms per 32 MiB.
__attribute__((target("avx2,fma"))) void scaled_add_avx2(float* a, const float* b, size_t n, double ca, double cb) {
  const __m256d ca4 = _mm256_set1_pd(ca), cb4 = _mm256_set1_pd(cb);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    prefetch_ahead(a + i, b + i);
    const __m256d a0 = _mm256_cvtps_pd(_mm_loadu_ps(a + i)), a1 = _mm256_cvtps_pd(_mm_loadu_ps(a + i + 4));
    const __m256d b0 = _mm256_cvtps_pd(_mm_loadu_ps(b + i)), b1 = _mm256_cvtps_pd(_mm_loadu_ps(b + i + 4));
    _mm_storeu_ps(a + i, _mm256_cvtpd_ps(_mm256_fmadd_pd(ca4, a0, _mm256_mul_pd(cb4, b0))));
    _mm_storeu_ps(a + i + 4, _mm256_cvtpd_ps(_mm256_fmadd_pd(ca4, a1, _mm256_mul_pd(cb4, b1))));
  }
  // The tail as the lanes compute each element, so that a result never depends on where a
  // call's range ends (the queues cut ranges into pieces: Note [Adasum through shared memory]).
  for (; i < n; ++i) a[i] = static_cast<float>(std::fma(ca, static_cast<double>(a[i]), cb * static_cast<double>(b[i])));
}

__attribute__((target("avx2,fma"))) void scaled_add_avx2(double* a, const double* b, size_t n, double ca, double cb) {
  const __m256d ca4 = _mm256_set1_pd(ca), cb4 = _mm256_set1_pd(cb);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    prefetch_ahead(a + i, b + i);
    const __m256d av = _mm256_loadu_pd(a + i), bv = _mm256_loadu_pd(b + i);
    _mm256_storeu_pd(a + i, _mm256_fmadd_pd(ca4, av, _mm256_mul_pd(cb4, bv)));
  }
  for (; i < n; ++i) a[i] = std::fma(ca, a[i], cb * b[i]);
}
#else
bool has_avx2_fma() { return false; }
struct Avx2Sums {};
template <typename T>
void dot_norms_avx2_groups(const T*, const T*, size_t, Avx2Sums&) {}
template <typename T>
DotNorms dot_norms_avx2_finish(const T*, const T*, size_t, const Avx2Sums&) { return {}; }
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

// A tensor's dot product and norms fed in consecutive pieces of any sizes, with the same
// arithmetic as dot_norms over the whole tensor at once, so the same bits: whole groups go
// straight into the kernel's accumulators, a group cut by a piece's end waits in `carry_`
// for the next piece, and finish() ends as the one call ends (float16 / bfloat16: blocks of
// kHalfBlock elements, converted to float32, as dot_norms_half cuts them).
class DotNormsStream {
 public:
  void start(DataType dtype) {
    dtype_ = dtype;
    es_ = dtype_size(dtype);
    avx2_ = has_avx2_fma();
    group_ = half() ? kHalfBlock : (avx2_ ? 8 : 4);
    carried_ = 0;
    avx2_sums_ = Avx2Sums{};
    typed_sums_ = TypedSums{};
    half_sums_ = DotNorms{};
  }

  void add(const char* a, const char* b, size_t n) {
    if (half()) return add_half(reinterpret_cast<const uint16_t*>(a), reinterpret_cast<const uint16_t*>(b), n);
    if (carried_ > 0) {
      const size_t m = std::min(group_ - carried_, n);
      std::memcpy(carry_a_ + carried_ * es_, a, m * es_);
      std::memcpy(carry_b_ + carried_ * es_, b, m * es_);
      carried_ += m;
      a += m * es_, b += m * es_, n -= m;
      if (carried_ < group_) return;
      groups(carry_a_, carry_b_, group_);
      carried_ = 0;
    }
    const size_t whole = n / group_ * group_;
    groups(a, b, whole);
    carried_ = n - whole;
    std::memcpy(carry_a_, a + whole * es_, carried_ * es_);
    std::memcpy(carry_b_, b + whole * es_, carried_ * es_);
  }

  DotNorms finish() {
    if (half()) {
      if (carried_ > 0) add_block(carried_);
      return half_sums_;
    }
    if (dtype_ == DataType::Float32) return finish_typed(reinterpret_cast<const float*>(carry_a_), reinterpret_cast<const float*>(carry_b_));
    return finish_typed(reinterpret_cast<const double*>(carry_a_), reinterpret_cast<const double*>(carry_b_));
  }

 private:
  bool half() const { return dtype_ == DataType::Float16 || dtype_ == DataType::BFloat16; }

  void groups(const char* a, const char* b, size_t n) {
    if (n == 0) return;
    if (dtype_ == DataType::Float32) {
      const float *fa = reinterpret_cast<const float*>(a), *fb = reinterpret_cast<const float*>(b);
      if (avx2_) dot_norms_avx2_groups(fa, fb, n, avx2_sums_);
      else dot_norms_typed_groups(fa, fb, n, typed_sums_);
    } else {
      const double *da = reinterpret_cast<const double*>(a), *db = reinterpret_cast<const double*>(b);
      if (avx2_) dot_norms_avx2_groups(da, db, n, avx2_sums_);
      else dot_norms_typed_groups(da, db, n, typed_sums_);
    }
  }

  template <typename T>
  DotNorms finish_typed(const T* a, const T* b) const {
    return avx2_ ? dot_norms_avx2_finish(a, b, carried_, avx2_sums_) : dot_norms_typed_finish(a, b, carried_, typed_sums_);
  }

  void add_half(const uint16_t* a, const uint16_t* b, size_t n) {
    const ToFloats to_floats = dtype_ == DataType::Float16 ? fp16_to_floats : bf16_to_floats;
    while (n > 0) {
      const size_t m = std::min(kHalfBlock - carried_, n);
      to_floats(block_a_ + carried_, a, m);
      to_floats(block_b_ + carried_, b, m);
      carried_ += m;
      a += m, b += m, n -= m;
      if (carried_ == kHalfBlock) {
        add_block(kHalfBlock);
        carried_ = 0;
      }
    }
  }

  void add_block(size_t n) {
    const DotNorms part = dot_norms_fast(block_a_, block_b_, n);
    half_sums_.dot += part.dot;
    half_sums_.aa += part.aa;
    half_sums_.bb += part.bb;
  }

  DataType dtype_ = DataType::Float32;
  size_t es_ = 4, group_ = 8, carried_ = 0;
  bool avx2_ = false;
  Avx2Sums avx2_sums_;
  TypedSums typed_sums_;
  DotNorms half_sums_;
  alignas(32) char carry_a_[8 * sizeof(double)], carry_b_[8 * sizeof(double)];
  float block_a_[kHalfBlock], block_b_[kHalfBlock];
};

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
// Two ranks on one host run Adasum through the shared area's queues (shm_allreduce.h's
// two-rank halves) instead of point-to-point messages, which through MPI's shared-memory
// transport cost several times the copy. Rank 0 owns the first half (rounded down), rank 1
// the rest, as in the general case, and there are three steps:
//   1. the queues' reduce-scatter half, whose "reduction" only reads: each rank sends the
//      half it does not own, piece by piece, and the owner adds each piece's part of every
//      tensor's dot product and norms (a DotNormsStream per tensor) straight from the queue,
//      against its own half, while the piece is in cache. Nothing is written and nothing is
//      kept: no scratch buffer;
//   2. each rank's partial sums go to the other through the queues' all-gather half, and
//      both add the same two (so both get the same bits), giving the coefficients;
//   3. a whole two-rank all-reduce through the queues, as Sum's, whose reduction is the
//      combination (and the postscale): each rank sends its peer's half again, the owner
//      combines each piece of its half with the peer's copy and sends the result back.
// Each rank reads its vector once in step 1 and step 3 moves what a Sum moves: about 1.5
// times a Sum's memory traffic, where keeping the peer's half in a scratch buffer between
// two passes cost 2.25 times (docs/benchmarks.md, "Adasum at 2 ranks").
// The sums are those of one dot_norms call over each tensor's part of the half (the stream
// cuts nothing) and the combination is computed element by element (the kernels' tails as
// their lanes), so the results are those of the point-to-point path, bitwise.

// Walks the tensors of a slice (`counts`: each tensor's elements in it, back to back) along
// runs given in order: calls fn(tensor, a, b, n) for each tensor's part of each run, and
// done(tensor) once a tensor's last element has been passed to fn.
class TensorCursor {
 public:
  TensorCursor(const std::vector<size_t>& counts, size_t es) : counts_(counts), es_(es) {}

  template <typename F, typename G>
  void run(char* a, const char* b, size_t pos, size_t n, F&& fn, G&& done) {
    const size_t end = pos + n;
    while (pos < end) {
      while (begin_ + counts_[tensor_] <= pos) begin_ += counts_[tensor_++];
      const size_t hi = std::min(end, begin_ + counts_[tensor_]);
      fn(tensor_, a, b, hi - pos);
      if (hi == begin_ + counts_[tensor_]) done(tensor_);
      a += (hi - pos) * es_, b += (hi - pos) * es_, pos = hi;
    }
  }

 private:
  const std::vector<size_t>& counts_;
  const size_t es_;
  size_t tensor_ = 0, begin_ = 0;  // the tensor at the cursor, and its first position
};

void adasum_two_ranks_shared(Transport& t, char* data, const std::vector<size_t>& counts, size_t total,
                             DataType dtype, double postscale) {
  const int me = t.rank();
  const bool left = me == 0;
  const size_t es = dtype_size(dtype);
  const size_t first_half = total / 2;
  const size_t begin = left ? 0 : first_half, keep = left ? first_half : total - first_half;
  Segments owned;  // segment r: what rank r owns
  owned.offset = {0, first_half};
  owned.count = {first_half, total - first_half};
  const SpanBuffer whole({{data, total}}, es);
  const std::vector<size_t> mine = counts_within(counts, begin, keep);
  const ShmPort port = ShmPort::of(t);

  // 1. Each tensor's partial dot product and norms over this rank's half.
  std::vector<double> sums(3 * counts.size(), 0.0);
  {
    TensorCursor cursor(mine, es);
    DotNormsStream stream;
    bool open = false;
    const ShmReduce partial_sums = [&](char* own, const char* peers, size_t at, size_t n) {
      cursor.run(own, peers, at - begin, n,
                 [&](size_t, const char* a, const char* b, size_t c) {
                   if (!open) stream.start(dtype), open = true;
                   stream.add(a, b, c);
                 },
                 [&](size_t i) {
                   const DotNorms p = stream.finish();
                   open = false;
                   sums[3 * i] += p.dot;
                   sums[3 * i + 1] += left ? p.aa : p.bb;
                   sums[3 * i + 2] += left ? p.bb : p.aa;
                 });
    };
    shm_two_ranks(port, whole, owned, dtype, ReduceOp::Sum, 1.0, Halves{true, false}, &partial_sums);
  }

  // 2. The group's sums: this rank's and the peer's, added alike on both sides.
  std::vector<double> theirs(sums.size());
  {
    const size_t m = sums.size();
    Segments each;
    each.offset = {0, m};
    each.count = {m, m};
    const std::vector<Span> spans = left ? std::vector<Span>{{sums.data(), m}, {theirs.data(), m}}
                                         : std::vector<Span>{{theirs.data(), m}, {sums.data(), m}};
    shm_two_ranks(port, SpanBuffer(spans, sizeof(double)), each, DataType::Float64, ReduceOp::Sum, 1.0,
                  Halves{false, true});
    for (size_t i = 0; i < m; ++i) sums[i] += theirs[i];
  }

  // 3. The combination, as a Sum's all-reduce through the queues.
  const auto coeffs = coefficients(sums, left);
  TensorCursor cursor(mine, es);
  const ShmReduce combine = [&](char* own, const char* peers, size_t at, size_t n) {
    cursor.run(own, peers, at - begin, n,
               [&](size_t i, char* a, const char* b, size_t c) {
                 scaled_add(a, b, c, dtype, coeffs[i].first, coeffs[i].second);
               },
               [](size_t) {});
    if (postscale != 1.0) copy_scaled(own, own, n, dtype, postscale);
  };
  shm_two_ranks(port, whole, owned, dtype, ReduceOp::Sum, 1.0, Halves{true, true}, &combine);
}

}  // namespace

bool adasum_uses_avx2_fma() { return has_avx2_fma(); }

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
  if (shared_memory && n == 2 && shm_allreduce_available(t)) {
    return adasum_two_ranks_shared(t, static_cast<char*>(data), counts, total, dtype, postscale);
  }
  if (scratch.size() < total * es) scratch.resize(total * es);

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
