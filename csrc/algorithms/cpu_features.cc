#include "algorithms/cpu_features.h"

#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define HVDLITE_X86_CPUID 1
#endif

namespace hvdlite {
namespace {

#ifdef HVDLITE_X86_CPUID
// XCR0's bits 1 and 2: the OS saves the SSE and the AVX (upper 128-bit) registers.
bool os_saves_avx_registers() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (lo & 0x6) == 0x6;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.avx = (c & bit_AVX) && (c & bit_OSXSAVE) && os_saves_avx_registers();
  f.fma = f.avx && (c & bit_FMA);
  f.f16c = f.avx && (c & bit_F16C);
  if (__get_cpuid_max(0, nullptr) >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = f.avx && (b & bit_AVX2);
  }
  return f;
}
#else
CpuFeatures detect() { return {}; }
#endif

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace hvdlite
