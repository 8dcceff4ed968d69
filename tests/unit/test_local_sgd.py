"""hvdlite.algorithms.local_sgd: the schedule of warm-up steps and parameter averages, on
Python ints and (as Keras uses it) through array operations."""

import numpy as np
import pytest

from hvdlite.algorithms.local_sgd import LocalSGDSchedule


class NumpyMath:
    less, greater, equal, logical_and = np.less, np.greater, np.equal, np.logical_and


def test_warmup_then_every_h_steps():
    s = LocalSGDSchedule(3, 2, "opt")
    assert [s.in_warmup(t) for t in range(4)] == [True, True, False, False]
    averaged = [t for t in range(1, 12) if s.averages_after(t)]
    assert averaged == [5, 8, 11]


def test_array_steps_agree_with_ints():
    s = LocalSGDSchedule(4, 1, "opt")
    for t in range(12):
        assert bool(s.averages_after(np.int32(t), NumpyMath)) == s.averages_after(t)
        assert bool(s.in_warmup(np.int32(t), NumpyMath)) == s.in_warmup(t)


def test_bad_settings_name_the_option():
    with pytest.raises(ValueError, match="opt: local_steps must be >= 1, got 0"):
        LocalSGDSchedule(0, 0, "opt")
    with pytest.raises(ValueError, match="local_sgd_warmup_steps must be >= 0"):
        LocalSGDSchedule(1, -1, "opt")
