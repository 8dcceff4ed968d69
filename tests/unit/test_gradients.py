"""hvdlite.policy.gradients: Horovod's gradient of each collective."""

from hvdlite.policy import Average, Sum
from hvdlite.policy.gradients import GRADIENTS, gradient_scale, own_rows, reducescatter_rows


def test_rules():
    assert GRADIENTS["allreduce"].op(Sum) == Sum and GRADIENTS["allreduce"].same_scales
    assert GRADIENTS["allgather"].op(Sum) == Average
    assert GRADIENTS["broadcast"].keep == "root"
    assert GRADIENTS["reducescatter"].collective == "allgather"


def test_reducescatter_scale():
    assert gradient_scale("reducescatter", Sum, 2.0, 0.5, 4) == 4.0
    assert gradient_scale("reducescatter", Average, 2.0, 0.5, 4) == 1.0
    assert gradient_scale("allgather", Sum, 2.0, 0.5, 4) == 1.0


def test_rows():
    assert own_rows([2, 3, 1], 1) == (2, 3)
    rows = [reducescatter_rows(10, 4, r) for r in range(4)]
    assert rows == [3, 3, 2, 2] and sum(rows) == 10
