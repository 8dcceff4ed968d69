"""Gradient compression for TensorFlow tensors, with Horovod's interface
(``hvdlite.tensorflow.Compression``, and the Keras TensorFlow bridge's).

See :mod:`hvdlite.algorithms.compression` for how to write a custom compressor and how the built-in
``Compression.fp16`` / ``Compression.bf16`` hand float32 and float64 tensors to the C++
core, which compresses them on the wire only.
"""

import tensorflow as tf

from hvdlite.algorithms.compression import Compressor, NoneCompressor, cast_compressors

Compression, FP16Compressor, BF16Compressor = cast_compressors(
    cast=tf.cast,
    is_floating=lambda dtype: dtype.is_floating,
    float16=tf.float16, bfloat16=tf.bfloat16)

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "BF16Compressor", "Compression"]
