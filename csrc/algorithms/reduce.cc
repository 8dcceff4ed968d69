#include "algorithms/reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "algorithms/half.h"
#include "algorithms/half_convert.h"

namespace hvdlite {
namespace {

// Note [NaN in Min and Max]
// Min and Max propagate NaN as numpy's minimum/maximum and torch's min/max do: a NaN in either
// operand gives NaN (std::min/std::max keep one only when it is the first operand, so a NaN
// would survive or vanish depending on which rank held it). The result is a function of the
// ordered pair (d, s): d's NaN if d is one, else s's. Every algorithm combines in an order
// that is the same on every rank (ring: a segment's chain; exchange and the controller: the
// lower rank's data first; shared memory and hierarchical: one rank reduces and sends), so NaN
// payloads and signs come out bitwise identical everywhere. Ties keep d, as std::min/max do.
template <typename T>
inline bool is_nan(T x) {
  if constexpr (std::is_floating_point_v<T>) return x != x;
  return false;
}
template <typename T>
inline T min_keeping_nan(T d, T s) { return (d <= s || is_nan(d)) ? d : s; }
template <typename T>
inline T max_keeping_nan(T d, T s) { return (d >= s || is_nan(d)) ? d : s; }

template <typename T>
void reduce_typed(T* __restrict d, const T* __restrict s, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Average:
    case ReduceOp::Sum: for (size_t i = 0; i < n; ++i) d[i] = d[i] + s[i]; break;
    case ReduceOp::Min: for (size_t i = 0; i < n; ++i) d[i] = min_keeping_nan(d[i], s[i]); break;
    case ReduceOp::Max: for (size_t i = 0; i < n; ++i) d[i] = max_keeping_nan(d[i], s[i]); break;
    case ReduceOp::Product: for (size_t i = 0; i < n; ++i) d[i] = d[i] * s[i]; break;
    case ReduceOp::Adasum: break;  // not element-wise: algorithms/adasum.h, never here
  }
}

// bool: Sum and Max are logical or; Min and Product are logical and.
void reduce_bool(uint8_t* d, const uint8_t* s, size_t n, ReduceOp op) {
  if (op == ReduceOp::Min || op == ReduceOp::Product) {
    for (size_t i = 0; i < n; ++i) d[i] = (d[i] && s[i]) ? 1 : 0;
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = (d[i] || s[i]) ? 1 : 0;
  }
}

// A 16-bit float format's bulk conversions (half_convert.h).
struct HalfFormat {
  void (*to_floats)(float*, const uint16_t*, size_t);
  void (*from_floats)(uint16_t*, const float*, size_t, float);
};
constexpr HalfFormat kFp16{fp16_to_floats, floats_to_fp16};
constexpr HalfFormat kBf16{bf16_to_floats, floats_to_bf16};
constexpr size_t kHalfBlock = 1024;  // elements converted at a time, on the stack

// float16/bfloat16 reduce in float32, a block at a time: unpack both, combine, pack.
void reduce_half(const HalfFormat& fmt, uint16_t* d, const uint16_t* s, size_t n, ReduceOp op) {
  float a[kHalfBlock], b[kHalfBlock];
  for (size_t at = 0; at < n; at += kHalfBlock) {
    const size_t c = std::min(kHalfBlock, n - at);
    fmt.to_floats(a, d + at, c);
    fmt.to_floats(b, s + at, c);
    reduce_typed(a, b, c, op);
    fmt.from_floats(d + at, a, c, 1.0f);
  }
}

// x = float(double(x) * f): the generic path's rounding (load as double, scale, store float).
void scale_floats_in_double(float* x, size_t n, double f) {
  if (f == 1.0) return;
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<float>(static_cast<double>(x[i]) * f);
}

void scale_half(const HalfFormat& fmt, uint16_t* d, const uint16_t* s, size_t n, double f) {
  float a[kHalfBlock];
  for (size_t at = 0; at < n; at += kHalfBlock) {
    const size_t c = std::min(kHalfBlock, n - at);
    fmt.to_floats(a, s + at, c);
    scale_floats_in_double(a, c, f);
    fmt.from_floats(d + at, a, c, 1.0f);
  }
}

const HalfFormat* half_format(DataType t) {
  return t == DataType::Float16 ? &kFp16 : t == DataType::BFloat16 ? &kBf16 : nullptr;
}

template <typename T>
void scale_typed(T* d, const T* s, size_t n, double f) {
  if constexpr (std::is_floating_point_v<T>) {
    const T tf = static_cast<T>(f);  // float32 scales in float32, as Horovod's ScaleBuffer
    for (size_t i = 0; i < n; ++i) d[i] = s[i] * tf;
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = static_cast<T>(static_cast<double>(s[i]) * f);
  }
}

// Reads element i of a buffer of any floating dtype as float/double.
double load(const void* p, DataType t, size_t i) {
  switch (t) {
    case DataType::Float16: return fp16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DataType::BFloat16: return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DataType::Float32: return static_cast<const float*>(p)[i];
    case DataType::Float64: return static_cast<const double*>(p)[i];
    default: return 0;
  }
}

void store(void* p, DataType t, size_t i, double v) {
  switch (t) {
    case DataType::Float16: static_cast<uint16_t*>(p)[i] = float_to_fp16(static_cast<float>(v)); break;
    case DataType::BFloat16: static_cast<uint16_t*>(p)[i] = float_to_bf16(static_cast<float>(v)); break;
    case DataType::Float32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::Float64: static_cast<double*>(p)[i] = v; break;
    default: break;
  }
}

}  // namespace

void reduce_into(void* dst, const void* src, size_t n, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::UInt8: reduce_typed(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n, op); break;
    case DataType::Int8: reduce_typed(static_cast<int8_t*>(dst), static_cast<const int8_t*>(src), n, op); break;
    case DataType::Int16: reduce_typed(static_cast<int16_t*>(dst), static_cast<const int16_t*>(src), n, op); break;
    case DataType::UInt16: reduce_typed(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n, op); break;
    case DataType::Int32: reduce_typed(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), n, op); break;
    case DataType::Int64: reduce_typed(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), n, op); break;
    case DataType::Float32: reduce_typed(static_cast<float*>(dst), static_cast<const float*>(src), n, op); break;
    case DataType::Float64: reduce_typed(static_cast<double*>(dst), static_cast<const double*>(src), n, op); break;
    case DataType::Float16:
    case DataType::BFloat16:
      reduce_half(*half_format(dtype), static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n, op);
      break;
    case DataType::Bool: reduce_bool(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n, op); break;
  }
}

double applied_postscale(ReduceOp op, double postscale, int size) {
  return op == ReduceOp::Average ? postscale / size : postscale;
}

void copy_scaled(void* dst, const void* src, size_t n, DataType dtype, double f) {
  if (f == 1.0 || dtype == DataType::Bool) {
    if (dst != src) std::memmove(dst, src, n * dtype_size(dtype));
    return;
  }
  switch (dtype) {
    case DataType::UInt8: scale_typed(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n, f); break;
    case DataType::Int8: scale_typed(static_cast<int8_t*>(dst), static_cast<const int8_t*>(src), n, f); break;
    case DataType::Int16: scale_typed(static_cast<int16_t*>(dst), static_cast<const int16_t*>(src), n, f); break;
    case DataType::UInt16: scale_typed(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n, f); break;
    case DataType::Int32: scale_typed(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), n, f); break;
    case DataType::Int64: scale_typed(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), n, f); break;
    case DataType::Float32: scale_typed(static_cast<float*>(dst), static_cast<const float*>(src), n, f); break;
    case DataType::Float64: scale_typed(static_cast<double*>(dst), static_cast<const double*>(src), n, f); break;
    case DataType::Float16:
    case DataType::BFloat16:
      scale_half(*half_format(dtype), static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n, f);
      break;
    case DataType::Bool: break;
  }
}

void convert_scaled(void* dst, DataType dst_dtype, const void* src, DataType src_dtype, size_t n,
                    double f) {
  // The hot cases (float32 gradients packed for the wire, and unpacked) in bulk.
  if (src_dtype == DataType::Float32 && half_format(dst_dtype)) {
    half_format(dst_dtype)->from_floats(static_cast<uint16_t*>(dst), static_cast<const float*>(src), n,
                                        static_cast<float>(f));  // scaled in float32, then rounded
    return;
  }
  if (dst_dtype == DataType::Float32 && half_format(src_dtype)) {
    float* d = static_cast<float*>(dst);
    half_format(src_dtype)->to_floats(d, static_cast<const uint16_t*>(src), n);
    scale_floats_in_double(d, n, f);
    return;
  }
  for (size_t i = 0; i < n; ++i) store(dst, dst_dtype, i, load(src, src_dtype, i) * f);
}

}  // namespace hvdlite
