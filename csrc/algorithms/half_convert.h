// Bulk float32 <-> float16 / bfloat16 conversions: the wire format's hot loops.
//
// Each gives, element for element, exactly what half.h's scalar functions give (the scalar
// functions are the reference, and the unit tests compare the two over every 16-bit value and
// many floats). On x86-64 CPUs with F16C, float16 uses the CPU's conversion instructions,
// chosen at run time, so ranks with and without F16C agree bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hvdlite {

// dst[i] = to_fp16(src[i] * scale)   (the product rounded to float first, as the scalar path)
void floats_to_fp16(uint16_t* dst, const float* src, size_t n, float scale);
void floats_to_bf16(uint16_t* dst, const float* src, size_t n, float scale);

// dst[i] = float(src[i])
void fp16_to_floats(float* dst, const uint16_t* src, size_t n);
void bf16_to_floats(float* dst, const uint16_t* src, size_t n);

// dst[i] = float(to_16bit(src[i])): what the wire leaves of a float32 (dst may be src). Error
// feedback keeps src - dst, so it must round exactly as the packing does.
void round_floats_through_fp16(float* dst, const float* src, size_t n);
void round_floats_through_bf16(float* dst, const float* src, size_t n);

// True when float16 conversions use the CPU's instructions (F16C) in this process.
bool fp16_uses_cpu_instructions();

}  // namespace hvdlite
