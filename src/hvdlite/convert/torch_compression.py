"""Gradient compression for torch tensors, with Horovod's interface (``hvdlite.torch.Compression``,
and the Keras torch bridge's).

See :mod:`hvdlite.algorithms.compression` for how to write a custom compressor and how the built-in
``Compression.fp16`` / ``Compression.bf16`` hand float32 and float64 tensors to the C++
core, which compresses them on the wire only.
"""

import torch

from hvdlite.algorithms.compression import Compressor, NoneCompressor, cast_compressors

Compression, FP16Compressor, BF16Compressor = cast_compressors(
    cast=lambda tensor, dtype: tensor.to(dtype),
    is_floating=lambda dtype: dtype.is_floating_point,
    float16=torch.float16, bfloat16=torch.bfloat16)

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "BF16Compressor", "Compression"]
