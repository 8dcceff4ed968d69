// Element-wise kernels on raw buffers: the reductions the ring applies, and the scaling done
// when tensors enter and leave a (fusion) buffer. float16/bfloat16 compute in float32.
#pragma once

#include <cstddef>

#include "hvdlite.h"

namespace hvdlite {

// dst[i] = dst[i] (op) src[i]. Average reduces as Sum; applied_postscale() divides.
void reduce_into(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op);

// The factor a reduction's result is multiplied by once, after it: the request's postscale,
// and for Average also 1/size (size: the ranks of the group, joined ones included). As in
// Horovod, the two are one multiplication, so results match its tests bit for bit.
double applied_postscale(ReduceOp op, double postscale, int size);

// Copies count elements src -> dst (which may be the same) multiplying by factor.
// Integers are multiplied in double and truncated toward zero (so Average of ints truncates).
void copy_scaled(void* dst, const void* src, size_t count, DataType dtype, double factor);

// Converts between a tensor's dtype and a 16-bit wire dtype, multiplying by factor on the way.
void convert_scaled(void* dst, DataType dst_dtype, const void* src, DataType src_dtype,
                    size_t count, double factor);

}  // namespace hvdlite
