// Adasum (Maleki et al., "Scaling Distributed Training with Adaptive Summation", MLSys 2021),
// as Horovod's horovod/common/ops/adasum/adasum.h runs it: a recursive vector-halving,
// distance-doubling all-reduce whose reduction is not element-wise. Two ranks' vectors a and
// b (one tensor each) combine as
//
//   a * (1 - a.b / (2 |a|^2)) + b * (1 - a.b / (2 |b|^2))
//
// (a coefficient stays 1 where that vector's squared norm is below sqrt(DBL_MIN), so zeros
// and tiny vectors add plainly), pairs of ranks first, then pairs of pairs, up to the whole
// set: a binary tree over the ranks in rank order. Orthogonal vectors add, parallel ones
// average.
//
// Note [Adasum per tensor]
// The dot product and norms are those of each TENSOR, never of the whole buffer: a fused
// buffer holds several tensors back to back (`counts`), and each keeps its own coefficients,
// so a fused result equals the unfused one. While halving, a rank holds a slice of the
// buffer that cuts through tensors (the halves fall wherever half the elements fall), so per
// level each rank computes the partial dot product and norms of each tensor's part in its
// slice, and the ranks of the level's group (the 2*level ranks whose slices make up the two
// vectors being combined) sum them, in float64, by recursive doubling. Sums combine the
// same two partials on both sides of each exchange, so every rank of a group gets the same
// bits, and each element of the result is computed once, by the rank owning it: results are
// bitwise identical on every rank.
//
// Dot products and norms accumulate in float64 for every dtype; the combination is computed
// in float64 and rounded once to the dtype (float16 / bfloat16 go through float32 on the way,
// as the rest of the core reads them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "hvdlite.h"
#include "transport/transport.h"

namespace hvdlite {

// Adasum supports these dtypes (Horovod: float16, float32, float64; bfloat16 here as well).
bool adasum_supports(DataType dtype);

// True when Adasum's kernels use the CPU's AVX2 and FMA in this process (Note [Adasum kernels]).
bool adasum_uses_avx2_fma();

// Horovod runs Adasum on a power-of-two number of ranks only.
inline bool adasum_rank_count_ok(int ranks) { return ranks > 0 && (ranks & (ranks - 1)) == 0; }

// The pairwise combination on one tensor held whole: a = a*(1 - d/(2|a|^2)) + b*(1 - d/(2|b|^2)).
// (The all-reduce below uses the same kernels on slices.)
void adasum_combine(void* a, const void* b, size_t count, DataType dtype);

// Adasum over every rank of `t` (a power of two of them, else Error(InvalidArgument)) of
// `data`: tensors of `counts` elements back to back, the same layout on every rank. The
// result, times postscale, lands in `data` on every rank (bitwise identical everywhere).
// `shared_memory` (the same on every rank): two ranks on one host go through the transport's
// shared area when it has one (Note [Adasum through shared memory] in adasum.cc), without
// scratch; otherwise, and at other sizes, point to point, and scratch grows to the buffer's
// size.
void adasum_allreduce(Transport& t, void* data, const std::vector<size_t>& counts, DataType dtype,
                      double postscale, std::vector<uint8_t>& scratch, bool shared_memory = true);

}  // namespace hvdlite
