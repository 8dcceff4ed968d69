"""hvdlite.policy.reduce_ops: op resolution, the Average-or-Sum rule, predivide."""

import numpy as np
import pytest

from hvdlite.exceptions import HvdliteInvalidArgumentError, HvdliteUnsupportedError
from hvdlite.policy import reduce_ops
from hvdlite.policy.reduce_ops import (Adasum, Average, Max, Min, Product, Sum, check_predivide,
                                       integer_arg, predivide, require_average_or_sum,
                                       resolve_op)


def test_horovod_numbering():
    assert (Average, Sum, Adasum, Min, Max, Product) == (0, 1, 2, 3, 4, 5)


@pytest.mark.parametrize("op", [Average, Sum, Min, Max, Product])
def test_core_ops_resolve_to_themselves(op):
    assert resolve_op(op) == op
    assert resolve_op(np.int64(op)) == op


def test_default_and_deprecated_average():
    assert resolve_op() == Average
    with pytest.warns(DeprecationWarning):
        assert resolve_op(average=False) == Sum
    with pytest.raises(ValueError, match="supersedes average"):
        resolve_op(Sum, average=True)


def test_adasum_resolves_and_its_rank_rule_names_the_size(monkeypatch):
    assert resolve_op(Adasum) == Adasum == 2
    monkeypatch.setattr(reduce_ops._core, "size", lambda: 3)
    monkeypatch.setattr(reduce_ops._core, "process_set_size", lambda set_id: 6)
    with pytest.raises(HvdliteUnsupportedError, match="myop: op=Adasum needs a power-of-two "
                                                      "number of ranks.*the job has 3"):
        reduce_ops.check_adasum_ranks(Adasum, 0, "myop")
    with pytest.raises(NotImplementedError, match="process set 2 has 6"):
        reduce_ops.check_adasum_ranks(Adasum, 2, "myop")
    reduce_ops.check_adasum_ranks(Sum, 0, "myop")  # other ops: no rule
    monkeypatch.setattr(reduce_ops._core, "size", lambda: 8)
    reduce_ops.check_adasum_ranks(Adasum, 0, "myop")


def test_bad_ops_name_the_call():
    with pytest.raises(HvdliteInvalidArgumentError, match="unknown reduce op 9"):
        resolve_op(9)
    with pytest.raises(HvdliteInvalidArgumentError, match="must be an integer"):
        resolve_op(1.0)
    with pytest.raises(HvdliteInvalidArgumentError, match="bool"):
        integer_arg(True, "root_rank")
    with pytest.raises(HvdliteInvalidArgumentError, match="out of range"):
        integer_arg(-1, "split", 0)


def test_require_average_or_sum():
    require_average_or_sum(Average, "x")
    require_average_or_sum(Sum, "x")
    with pytest.raises(HvdliteInvalidArgumentError,
                       match=r"sharding: op must be Average or Sum, not Max \(why\)"):
        require_average_or_sum(Max, "sharding", "why")
    with pytest.raises(HvdliteUnsupportedError):
        require_average_or_sum(Min, "sparse", error=HvdliteUnsupportedError)


def test_predivide_splits_the_average():
    op, pre, post = predivide(Average, 4.0, 8)
    assert (op, pre, post) == (Sum, 0.25, 0.5)
    # the sum of 8 values scaled by pre then post is their average
    values = np.arange(8.0)
    assert np.isclose((values * pre).sum() * post, values.mean())
    assert predivide(Sum, 1.0, 8) == (Sum, 1.0, 1.0)
    assert predivide(Average, 1.0, 8) == (Average, 1.0, 1.0)


def test_check_predivide():
    check_predivide(Average, 2.0, "opt")
    with pytest.raises(ValueError, match="op != Average"):
        check_predivide(Sum, 2.0, "opt")
    with pytest.raises(ValueError, match="> 0"):
        check_predivide(Average, 0.0, "opt")


def test_names_of_every_op():
    assert set(reduce_ops.REDUCE_OP_NAMES) == {Average, Sum, Adasum, Min, Max, Product}


def test_gathered_rows_divide_by_the_set_size_for_average_only():
    from hvdlite.policy.reduce_ops import gathered_rows_divisor
    assert gathered_rows_divisor(Average, 4, "sparse", "rows gathered") == 4
    assert gathered_rows_divisor(Sum, 4, "sparse", "rows gathered") == 1
    with pytest.raises(HvdliteUnsupportedError, match=r"sparse: op must be Average or Sum, "
                                                      r"not Max \(rows gathered\)"):
        gathered_rows_divisor(Max, 4, "sparse", "rows gathered", HvdliteUnsupportedError)


class _Set:
    """A process set of ``n`` ranks, as far as the rules read one."""

    def __init__(self, n):
        self.n = n

    def size(self):
        return self.n


def test_reduction_predivides_over_the_set_size():
    from hvdlite.policy.reduce_ops import reduction
    assert reduction(Average, 4.0, _Set(8)) == (Sum, 0.25, 0.5)
    assert reduction(Sum, 1.0, _Set(8)) == (Sum, 1.0, 1.0)
