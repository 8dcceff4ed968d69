"""hvdlite.policy.wire: which compression the core applies and which runs in Python."""

import numpy as np
import pytest

from hvdlite.exceptions import HvdliteInvalidArgumentError
from hvdlite.policy.wire import compressed, decompressed, wire_code, wire_format


class FP16:
    wire_dtype = "fp16"


class Custom:
    wire_dtype = None


class Identity:
    is_identity = True


def test_builtin_casts_go_to_the_core_for_wide_floats():
    assert wire_format(FP16, "float32") == ("fp16", False)
    assert wire_format(FP16, "float64") == ("fp16", False)
    assert wire_format(FP16, "int32") == (None, False)       # left alone
    assert wire_format(FP16, "float16") == (None, True)      # cast in Python
    assert wire_format("bf16", "float16") == (None, False)


def test_no_compression_and_custom_compressors():
    assert wire_format(None, "float32") == (None, False)
    assert wire_format(Identity, "float32") == (None, False)
    assert wire_format(Custom, "float32") == (None, True)


def test_wire_codes():
    assert [wire_code(w) for w in (None, "none", "fp16", "bf16", FP16)] == [0, 0, 1, 2, 1]
    with pytest.raises(HvdliteInvalidArgumentError, match="unknown compression"):
        wire_code("int8")


class _Halving:
    """A Python-side compressor (numpy): sends half the values, remembers the dtype."""

    @staticmethod
    def compress(t):
        return (t / 2).astype(np.float64), t.dtype

    @staticmethod
    def decompress(t, dtype):
        return (t * 2).astype(dtype)


def test_python_side_compression_round_trips_with_its_contexts():
    tensors = [np.arange(3, dtype=np.float32), np.ones(2, dtype=np.float16)]
    sent, ctxs = compressed(_Halving, tensors, True)
    assert [s.dtype for s in sent] == [np.float64, np.float64] and ctxs == [np.float32, np.float16]
    np.testing.assert_array_equal(sent[0], [0, 0.5, 1])
    back = decompressed(_Halving, sent, ctxs, True)
    assert [b.dtype for b in back] == [np.float32, np.float16]
    np.testing.assert_array_equal(back[0], tensors[0])


def test_without_python_side_compression_tensors_pass_as_they_are():
    tensors = [np.zeros(1)]
    sent, ctxs = compressed(_Halving, tensors, False)
    assert sent[0] is tensors[0] and ctxs == [None]
    assert decompressed(_Halving, sent, ctxs, False) is sent
