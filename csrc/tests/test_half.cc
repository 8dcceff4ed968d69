// float16 / bfloat16 conversions: exact round trips, and round-to-nearest-even checked at every
// midpoint between neighbouring 16-bit values (the only places rounding can go wrong).
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "algorithms/half.h"
#include "algorithms/half_convert.h"
#include "algorithms/reduce.h"
#include "harness.h"

namespace hvdlite {
namespace {

// For every pair of neighbouring positive finite values lo < hi of a 16-bit format: the
// midpoint rounds to the one with an even significand, and a float just off it to the nearer.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void check_rounding(uint16_t largest_finite) {
  for (uint32_t h = 0; h < largest_finite; ++h) {
    const uint16_t lo = static_cast<uint16_t>(h), hi = static_cast<uint16_t>(h + 1);
    const float flo = ToFloat(lo), fhi = ToFloat(hi);
    CHECK_EQ(FromFloat(flo), lo);
    CHECK_EQ(FromFloat(-flo), static_cast<uint16_t>(lo | 0x8000));
    const float mid = flo + (fhi - flo) / 2;  // exact: 16-bit significands fit in a float's
    CHECK_EQ(FromFloat(mid), (lo & 1) ? hi : lo);
    CHECK_EQ(FromFloat(std::nextafter(mid, 0.0f)), lo);
    CHECK_EQ(FromFloat(std::nextafter(mid, std::numeric_limits<float>::infinity())), hi);
  }
}

TEST(fp16_round_trips_and_rounds_to_nearest_even) {
  check_rounding<fp16_to_float, float_to_fp16>(0x7bff);
  CHECK_EQ(fp16_to_float(0x7bff), 65504.0f);
  CHECK_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  // 65520 is the midpoint between 65504 and the next (unrepresentable) step: rounds to inf.
  CHECK_EQ(float_to_fp16(65520.0f), uint16_t(0x7c00));
  CHECK_EQ(float_to_fp16(std::nextafter(65520.0f, 0.0f)), uint16_t(0x7bff));
  CHECK_EQ(float_to_fp16(-1e30f), uint16_t(0xfc00));
  CHECK(std::isinf(fp16_to_float(0x7c00)));
  CHECK(std::isnan(fp16_to_float(float_to_fp16(std::nanf("")))));
  CHECK_EQ(float_to_fp16(std::ldexp(1.0f, -26)), uint16_t(0));  // below half the smallest: 0
}

TEST(bf16_round_trips_and_rounds_to_nearest_even) {
  check_rounding<bf16_to_float, float_to_bf16>(0x7f7f);
  CHECK_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), uint16_t(0x7f80));
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  // A NaN whose payload sits only in the low bits must not become infinity.
  CHECK(std::isnan(bf16_to_float(float_to_bf16(bits_to_float(0x7f800001u)))));
}

// Every 16-bit pattern unpacks in bulk to the scalar function's float, bit for bit (NaNs too:
// see Note [F16C and the scalar reference]); odd lengths exercise the vector loops' tails.
template <float (*ToFloat)(uint16_t)>
void check_bulk_unpack(void (*bulk)(float*, const uint16_t*, size_t)) {
  std::vector<uint16_t> all(65536 + 3);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
  for (size_t n : {all.size(), size_t(7), size_t(13)}) {
    std::vector<float> out(n);
    bulk(out.data(), all.data(), n);
    for (size_t i = 0; i < n; ++i) CHECK_EQ(float_to_bits(out[i]), float_to_bits(ToFloat(all[i])));
  }
}

// Random float bit patterns (NaNs, infinities, subnormals included) plus the values around every
// 16-bit midpoint pack in bulk to the scalar function's bits, unscaled and scaled.
template <uint16_t (*FromFloat)(float), float (*ToFloat)(uint16_t)>
void check_bulk_pack(void (*bulk)(uint16_t*, const float*, size_t, float)) {
  std::mt19937 gen(7);
  std::vector<float> in;
  for (int i = 0; i < 200003; ++i) in.push_back(bits_to_float(static_cast<uint32_t>(gen())));
  for (uint32_t h = 0; h < 0x7c00; h += 3) {
    const float lo = ToFloat(static_cast<uint16_t>(h)), hi = ToFloat(static_cast<uint16_t>(h + 1));
    const float mid = lo + (hi - lo) / 2;
    for (float v : {mid, std::nextafter(mid, 0.0f), -mid, lo}) in.push_back(v);
  }
  for (float scale : {1.0f, 0.37f, 1024.0f}) {
    std::vector<uint16_t> out(in.size());
    bulk(out.data(), in.data(), in.size(), scale);
    for (size_t i = 0; i < in.size(); ++i) CHECK_EQ(out[i], FromFloat(in[i] * scale));
  }
}

TEST(bulk_conversions_equal_the_scalar_reference) {
  std::printf("  fp16 bulk conversions use F16C: %s\n", fp16_uses_cpu_instructions() ? "yes" : "no");
  check_bulk_unpack<fp16_to_float>(fp16_to_floats);
  check_bulk_unpack<bf16_to_float>(bf16_to_floats);
  check_bulk_pack<float_to_fp16, fp16_to_float>(floats_to_fp16);
  check_bulk_pack<float_to_bf16, bf16_to_float>(floats_to_bf16);
}

// The block-wise 16-bit reduction and scaling give what one element at a time gives.
TEST(half_reduce_and_scale_equal_elementwise_float_math) {
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const size_t n = 2500;  // two full blocks and a tail
  std::vector<uint16_t> a(n), b(n);
  for (size_t i = 0; i < n; ++i) { a[i] = float_to_fp16(normal(gen)); b[i] = float_to_fp16(normal(gen)); }
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product}) {
    std::vector<uint16_t> d = a;
    reduce_into(d.data(), b.data(), n, DataType::Float16, op);
    for (size_t i = 0; i < n; ++i) {
      const float x = fp16_to_float(a[i]), y = fp16_to_float(b[i]);
      const float r = op == ReduceOp::Min ? std::min(x, y) : op == ReduceOp::Max ? std::max(x, y)
                    : op == ReduceOp::Product ? x * y : x + y;
      CHECK_EQ(d[i], float_to_fp16(r));
    }
  }
  std::vector<uint16_t> scaled(n);
  copy_scaled(scaled.data(), a.data(), n, DataType::BFloat16, 0.3);
  for (size_t i = 0; i < n; ++i)
    CHECK_EQ(scaled[i], float_to_bf16(static_cast<float>(static_cast<double>(bf16_to_float(a[i])) * 0.3)));
  std::vector<float> unpacked(n);
  convert_scaled(unpacked.data(), DataType::Float32, a.data(), DataType::Float16, n, 1.0 / 3);
  for (size_t i = 0; i < n; ++i)
    CHECK_EQ(float_to_bits(unpacked[i]),
             float_to_bits(static_cast<float>(static_cast<double>(fp16_to_float(a[i])) * (1.0 / 3))));
}

}  // namespace
}  // namespace hvdlite
