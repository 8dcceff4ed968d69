"""Gradient compression for ``hvdlite.torch`` (Horovod's ``horovod.torch.compression``):
defined in :mod:`hvdlite.convert.torch_compression`, which the Keras torch bridge shares."""

from hvdlite.convert.torch_compression import (BF16Compressor, Compression,  # noqa: F401
                                               Compressor, FP16Compressor, NoneCompressor)

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "BF16Compressor", "Compression"]
