// float16 / bfloat16 conversions: exact round trips, and round-to-nearest-even checked at every
// midpoint between neighbouring 16-bit values (the only places rounding can go wrong).
#include <cmath>
#include <limits>

#include "../half.h"
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

}  // namespace
}  // namespace hvdlite
