"""hvdlite.policy.wire: which compression the core applies and which runs in Python."""

import pytest

from hvdlite.exceptions import HvdliteInvalidArgumentError
from hvdlite.policy.wire import wire_code, wire_format


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
