"""Gradient compression for ``hvdlite.tensorflow`` (Horovod's
``horovod.tensorflow.compression``): defined in :mod:`hvdlite.convert.tf_compression`, which
the Keras TensorFlow bridge shares."""

from hvdlite.convert.tf_compression import (BF16Compressor, Compression,  # noqa: F401
                                            Compressor, FP16Compressor, NoneCompressor)

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "BF16Compressor", "Compression"]
