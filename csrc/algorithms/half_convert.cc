#include "algorithms/half_convert.h"

#include "algorithms/cpu_features.h"
#include "algorithms/half.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HVDLITE_HAVE_F16C_PATH 1
#endif

namespace hvdlite {
namespace {

// Portable loops over half.h's scalar functions (bf16's vectorize; fp16's are the fallback).
void floats_to_fp16_scalar(uint16_t* d, const float* s, size_t n, float scale) {
  for (size_t i = 0; i < n; ++i) d[i] = float_to_fp16(s[i] * scale);
}

void fp16_to_floats_scalar(float* d, const uint16_t* s, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = fp16_to_float(s[i]);
}

#ifdef HVDLITE_HAVE_F16C_PATH
// Note [F16C and the scalar reference]
// vcvtps2ph with round-to-nearest-even and vcvtph2ps give the scalar functions' results for
// every finite value, infinities and subnormals. For NaN, half.h was written to do what the
// instructions do (keep the payload's top bits, set the quiet bit), so that ranks on CPUs
// with and without F16C produce the same bits.
__attribute__((target("avx,f16c"))) void floats_to_fp16_f16c(uint16_t* d, const float* s,
                                                             size_t n, float scale) {
  const __m256 k = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + i), k);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  floats_to_fp16_scalar(d + i, s + i, n - i, scale);
}

__attribute__((target("avx,f16c"))) void fp16_to_floats_f16c(float* d, const uint16_t* s,
                                                             size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(h));
  }
  fp16_to_floats_scalar(d + i, s + i, n - i);
}

const bool kF16C = cpu_features().f16c;  // Note [CPU features at run time]
#else
const bool kF16C = false;
#endif

}  // namespace

bool fp16_uses_cpu_instructions() { return kF16C; }

void floats_to_fp16(uint16_t* dst, const float* src, size_t n, float scale) {
#ifdef HVDLITE_HAVE_F16C_PATH
  if (kF16C) return floats_to_fp16_f16c(dst, src, n, scale);
#endif
  floats_to_fp16_scalar(dst, src, n, scale);
}

void fp16_to_floats(float* dst, const uint16_t* src, size_t n) {
#ifdef HVDLITE_HAVE_F16C_PATH
  if (kF16C) return fp16_to_floats_f16c(dst, src, n);
#endif
  fp16_to_floats_scalar(dst, src, n);
}

void floats_to_bf16(uint16_t* dst, const float* src, size_t n, float scale) {
  for (size_t i = 0; i < n; ++i) dst[i] = float_to_bf16(src[i] * scale);
}

void bf16_to_floats(float* dst, const uint16_t* src, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bf16_to_float(src[i]);
}

namespace {
template <void (*Pack)(uint16_t*, const float*, size_t, float),
          void (*Unpack)(float*, const uint16_t*, size_t)>
void round_through(float* dst, const float* src, size_t n) {
  constexpr size_t kBlock = 2048;
  uint16_t packed[kBlock];
  for (size_t at = 0; at < n; at += kBlock) {
    const size_t c = n - at < kBlock ? n - at : kBlock;
    Pack(packed, src + at, c, 1.0f);
    Unpack(dst + at, packed, c);
  }
}
}  // namespace

void round_floats_through_fp16(float* dst, const float* src, size_t n) {
  round_through<floats_to_fp16, fp16_to_floats>(dst, src, n);
}

void round_floats_through_bf16(float* dst, const float* src, size_t n) {
  round_through<floats_to_bf16, bf16_to_floats>(dst, src, n);
}

}  // namespace hvdlite
