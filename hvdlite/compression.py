"""Gradient compression with Horovod's interface, shared by the framework adapters.

A compressor is a class (never instantiated) with two static methods::

    class MyCompressor(hvd.Compressor):
        @staticmethod
        def compress(tensor):
            # -> (tensor to all-reduce, context needed to undo the compression)
            ...

        @staticmethod
        def decompress(tensor, ctx):
            # -> tensor with the original dtype and shape
            ...

``compress`` runs before the reduction on every rank and ``decompress`` after it; the
compressed tensor must have the same shape on every rank and a dtype the core supports.

The built-in ``Compression.fp16`` and ``Compression.bf16`` carry a ``wire_dtype``: for
float32/float64 tensors the adapters then hand compression to the C++ core, which packs
the values as 16-bit floats on the wire only (no extra framework tensors; results come back
in the original dtype). Their ``compress``/``decompress`` still work when called directly
and are used for other floating dtypes. A subclass that overrides ``compress`` must set
``wire_dtype = None`` so that its own methods are used.
"""


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

    #: Nothing to do: the adapters skip compress/decompress.
    is_identity = True

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


def cast_compressors(cast, is_floating, float16, bfloat16):
    """Build a framework's ``Compression`` namespace from its cast and dtype test.

    ``cast(tensor, dtype)`` converts; ``is_floating(dtype)`` tells floating dtypes.
    """

    class CastCompressor(Compressor):
        target = None

        @classmethod
        def compress(cls, tensor):
            if is_floating(tensor.dtype) and tensor.dtype != cls.target:
                return cast(tensor, cls.target), tensor.dtype
            return tensor, None

        @staticmethod
        def decompress(tensor, ctx):
            return tensor if ctx is None else cast(tensor, ctx)

    class FP16Compressor(CastCompressor):
        """Send floating point tensors as float16 (IEEE half precision)."""
        wire_dtype = "fp16"
        target = float16

    class BF16Compressor(CastCompressor):
        """Send floating point tensors as bfloat16 (wider range than fp16, fewer mantissa bits)."""
        wire_dtype = "bf16"
        target = bfloat16

    class Compression:
        """The built-in compressors: ``Compression.none``, ``.fp16``, ``.bf16``."""
        none = NoneCompressor
        fp16 = FP16Compressor
        bf16 = BF16Compressor

    return Compression, FP16Compressor, BF16Compressor
