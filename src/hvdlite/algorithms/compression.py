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

Compression with state between steps (error buffers, PowerSGD's Q) does not fit the
compress/decompress interface; ``Compression.powersgd(rank, start_step)``,
``Compression.topk(ratio)`` and ``Compression.fp16(error_feedback=True)`` (likewise bf16)
return a :class:`StatefulCompression` setting, from which an optimizer builds its own
reducer (see :mod:`hvdlite.algorithms.error_feedback` and :mod:`hvdlite.algorithms.powersgd`).
"""

from hvdlite.exceptions import HvdliteInvalidArgumentError

from .error_feedback import CastReducer, TopKReducer
from .powersgd import PowerSGDReducer


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


class StatefulCompression:
    """A compression setting whose reducer keeps state; each optimizer makes its own."""

    #: Read by hvdlite.policy (which sits below this module) to tell these settings apart.
    keeps_state = True

    #: The gradient dtypes the reducers take.
    FLOATS = ("float32", "float64")

    def make_reducer(self):
        raise NotImplementedError

    def check_dtype(self, dtype: str, label: str, what: str):
        if dtype not in self.FLOATS:
            raise HvdliteInvalidArgumentError(
                f"{what}: compression={self!r}: the gradient of {label} has dtype {dtype}; "
                f"stateful compression handles float32 and float64 gradients")

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({args})"


class PowerSGD(StatefulCompression):
    """Rank-``rank`` PowerSGD with error feedback, uncompressed before ``start_step``."""

    def __init__(self, rank=1, start_step=0):
        if int(rank) < 1 or int(start_step) < 0:
            raise ValueError(f"Compression.powersgd: rank must be >= 1 and start_step >= 0, "
                             f"got rank={rank}, start_step={start_step}")
        self.rank, self.start_step = int(rank), int(start_step)

    def make_reducer(self):
        return PowerSGDReducer(self.rank, self.start_step)


class TopK(StatefulCompression):
    """Top-k sparsification (a ``ratio`` of each tensor's entries) with error feedback; over
    the first ``warmup_steps`` the ratio falls exponentially from dense to ``ratio``; with
    ``momentum`` the reducer applies momentum itself, before selecting (momentum correction:
    give the optimizer momentum 0). See :class:`hvdlite.algorithms.error_feedback.TopKReducer`."""

    def __init__(self, ratio, warmup_steps=0, momentum=0.0):
        if not 0.0 < float(ratio) < 1.0:
            raise ValueError(f"Compression.topk: ratio must be in (0, 1), got {ratio}")
        if int(warmup_steps) < 0:
            raise ValueError(f"Compression.topk: warmup_steps must be >= 0, got {warmup_steps}")
        if not 0.0 <= float(momentum) < 1.0:
            raise ValueError(f"Compression.topk: momentum must be in [0, 1), got {momentum}")
        self.ratio, self.warmup_steps = float(ratio), int(warmup_steps)
        self.momentum = float(momentum)

    def make_reducer(self):
        return TopKReducer(self.ratio, self.warmup_steps, self.momentum)


class ErrorFeedbackCast(StatefulCompression):
    """16-bit casts (``wire`` 'fp16' or 'bf16') whose rounding error is fed back."""

    def __init__(self, wire):
        self.wire = wire

    def make_reducer(self):
        return CastReducer(self.wire)


def is_stateful(compression):
    return getattr(compression, "keeps_state", False)


def cast_compressors(cast, is_floating, float16, bfloat16):
    """Build a framework's ``Compression`` namespace from its cast and dtype test.

    ``cast(tensor, dtype)`` converts; ``is_floating(dtype)`` tells floating dtypes.
    """

    class CastCompressor(Compressor):
        target = None

        def __new__(cls, error_feedback=False):
            # Compression.fp16 is used as a class (Horovod); Compression.fp16(error_feedback=
            # True) asks for the stateful form. Called without it, it is the class itself.
            return ErrorFeedbackCast(cls.wire_dtype) if error_feedback else cls

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
        """The built-in compressors: ``Compression.none``, ``.fp16``, ``.bf16`` (each also
        ``.fp16(error_feedback=True)``), ``.powersgd(rank, start_step)``,
        ``.topk(ratio, warmup_steps, momentum)``."""
        none = NoneCompressor
        fp16 = FP16Compressor
        bf16 = BF16Compressor
        powersgd = PowerSGD
        topk = TopK

    return Compression, FP16Compressor, BF16Compressor
