#include "reduce.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "half.h"

namespace hvdlite {
namespace {

template <typename T>
void reduce_typed(T* __restrict d, const T* __restrict s, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Average:
    case ReduceOp::Sum: for (size_t i = 0; i < n; ++i) d[i] = d[i] + s[i]; break;
    case ReduceOp::Min: for (size_t i = 0; i < n; ++i) d[i] = std::min(d[i], s[i]); break;
    case ReduceOp::Max: for (size_t i = 0; i < n; ++i) d[i] = std::max(d[i], s[i]); break;
    case ReduceOp::Product: for (size_t i = 0; i < n; ++i) d[i] = d[i] * s[i]; break;
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

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void reduce_half(uint16_t* d, const uint16_t* s, size_t n, ReduceOp op) {
  for (size_t i = 0; i < n; ++i) {
    float a = ToFloat(d[i]), b = ToFloat(s[i]), r;
    switch (op) {
      case ReduceOp::Min: r = std::min(a, b); break;
      case ReduceOp::Max: r = std::max(a, b); break;
      case ReduceOp::Product: r = a * b; break;
      default: r = a + b; break;
    }
    d[i] = FromFloat(r);
  }
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
      reduce_half<fp16_to_float, float_to_fp16>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n, op);
      break;
    case DataType::BFloat16:
      reduce_half<bf16_to_float, float_to_bf16>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), n, op);
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
      for (size_t i = 0; i < n; ++i) store(dst, dtype, i, load(src, dtype, i) * f);
      break;
    case DataType::Bool: break;
  }
}

void convert_scaled(void* dst, DataType dst_dtype, const void* src, DataType src_dtype, size_t n,
                    double f) {
  if (src_dtype == DataType::Float32 && (dst_dtype == DataType::Float16 || dst_dtype == DataType::BFloat16)) {
    // The hot case (float32 gradients compressed for the wire) without the generic dispatch.
    const float* s = static_cast<const float*>(src);
    uint16_t* d = static_cast<uint16_t*>(dst);
    const float ff = static_cast<float>(f);
    if (dst_dtype == DataType::Float16) for (size_t i = 0; i < n; ++i) d[i] = float_to_fp16(s[i] * ff);
    else for (size_t i = 0; i < n; ++i) d[i] = float_to_bf16(s[i] * ff);
    return;
  }
  for (size_t i = 0; i < n; ++i) store(dst, dst_dtype, i, load(src, src_dtype, i) * f);
}

}  // namespace hvdlite
