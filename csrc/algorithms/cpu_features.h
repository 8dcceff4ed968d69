// Which x86-64 instruction-set extensions this CPU and its OS offer, for the kernels that
// choose a version at run time (half_convert.cc's F16C, adasum.cc's AVX2 and FMA).
//
// Note [CPU features at run time]
// Read from CPUID, with XGETBV for the OS's part (an AVX instruction faults unless the OS saves
// the 256-bit registers), not from __builtin_cpu_supports: that reads a table which the C
// runtime's start-up code fills (libgcc's or compiler-rt's), and the runtime that Zig links
// into the wheel leaves it empty. The wheel then ran the baseline kernels on every CPU:
// Adasum's 64 MiB all-reduce took 16 ms where a build with GCC took 12, and float16
// conversions went without F16C.
#pragma once

namespace hvdlite {

struct CpuFeatures {
  bool avx = false;   // and the OS saves the AVX registers
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
};

// Detected once; all false off x86-64.
const CpuFeatures& cpu_features();

}  // namespace hvdlite
