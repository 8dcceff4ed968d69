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


def test_only_present_gradients_are_reduced_in_one_call():
    from hvdlite.policy.gradients import reduce_present
    calls = []

    def reduce(indices):
        calls.append(list(indices))
        return [f"reduced {i}" for i in indices]
    assert reduce_present((None, "g1", None, "g3"), reduce) == [None, "reduced 1", None,
                                                                  "reduced 3"]
    assert calls == [[1, 3]]
    assert reduce_present([None, None], reduce) == [None, None]
    assert calls == [[1, 3]]            # nothing to reduce: no call (no empty request)
