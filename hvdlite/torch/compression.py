"""Gradient compression for ``hvdlite.torch``, with Horovod's interface.

A compressor is a class (never instantiated) with two static methods::

    class MyCompressor(hvd.Compressor):
        @staticmethod
        def compress(tensor):
            # -> (tensor to all-reduce, context needed to undo the compression)
            return tensor.to(torch.float16), tensor.dtype

        @staticmethod
        def decompress(tensor, ctx):
            # -> tensor with the original dtype and shape
            return tensor.to(ctx)

Pass it as ``compression=`` to :func:`hvdlite.torch.allreduce`,
:func:`~hvdlite.torch.grouped_allreduce`, :func:`~hvdlite.torch.reducescatter` or
:func:`~hvdlite.torch.DistributedOptimizer`. ``compress`` runs before the reduction on
every rank and ``decompress`` after it; the compressed tensor must have the same shape on
every rank and a dtype the core supports (uint8, int8, int32, int64, float16, bfloat16,
float32, float64, bool).

The built-in ``Compression.fp16`` and ``Compression.bf16`` carry a ``wire_dtype``
attribute: for float32/float64 tensors hvdlite then hands the compression to the C++
core, which packs the values as 16-bit floats on the wire only (no extra torch tensors
are made and the result is written straight back in the original dtype). Their
``compress``/``decompress`` still work as in Horovod when called directly, and are
used for dtypes the core does not pack. A subclass of these that overrides ``compress``
must set ``wire_dtype = None`` so that its own methods are used.
"""

import torch


class Compressor:
    """Interface for compressing and decompressing a tensor (see the module docstring)."""

    #: Name of a 16-bit wire format the C++ core applies itself ("fp16" or "bf16"),
    #: or None to use ``compress``/``decompress`` in Python.
    wire_dtype = None

    @staticmethod
    def compress(tensor):
        """Compress ``tensor``; return ``(compressed_tensor, ctx)``."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        """Undo :meth:`compress` on the reduced ``tensor`` using ``ctx``."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Default: no compression."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class _CastCompressor(Compressor):
    _dtype = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating_point and tensor.dtype != cls._dtype:
            return tensor.to(cls._dtype), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tensor.to(ctx)


class FP16Compressor(_CastCompressor):
    """Send floating point tensors as float16 (IEEE half precision)."""
    wire_dtype = "fp16"
    _dtype = torch.float16


class BF16Compressor(_CastCompressor):
    """Send floating point tensors as bfloat16 (wider range than fp16, fewer mantissa bits)."""
    wire_dtype = "bf16"
    _dtype = torch.bfloat16


class Compression:
    """The built-in compressors: ``Compression.none``, ``Compression.fp16``, ``Compression.bf16``."""
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
