"""hvdlite.algorithms.compression: the stateful compression settings' one dtype rule."""

import pytest

from hvdlite.algorithms.compression import ErrorFeedbackCast, PowerSGD
from hvdlite.exceptions import HvdliteInvalidArgumentError


def test_stateful_compression_takes_float32_and_float64_gradients():
    for dtype in ("float32", "float64"):
        PowerSGD(2).check_dtype(dtype, "parameter 'w'", "opt")
    with pytest.raises(HvdliteInvalidArgumentError) as e:
        ErrorFeedbackCast("fp16").check_dtype("float16", "parameter 'w'", "opt")
    assert str(e.value) == ("opt: compression=ErrorFeedbackCast(wire='fp16'): the gradient of "
                            "parameter 'w' has dtype float16; stateful compression handles "
                            "float32 and float64 gradients")
    assert isinstance(e.value, ValueError)
