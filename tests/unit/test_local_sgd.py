"""hvdlite.algorithms.local_sgd: the schedule of warm-up steps and parameter averages, on
Python ints and (as Keras uses it) through array operations."""

import numpy as np
import pytest

from hvdlite.algorithms.local_sgd import (LocalSGDSchedule, average, average_host,
                                          averages_state)


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


def test_averaged_state_is_per_element_floating_state():
    assert averages_state("float32", 2) and averages_state("torch.bfloat16", 1)
    assert not averages_state("float32", 0)        # a scalar (a step counter, a rate)
    assert not averages_state("int64", 1)


def test_average_is_the_mean_over_ranks(ranks):
    fake = ranks(3)

    def rank(r):
        arrays = [np.full(4, float(r)), np.full((2, 2), r * 3.0)]
        average(arrays, ["p", "m"])         # in place
        return arrays

    for params, moment in fake.run_ranks(rank):
        assert np.array_equal(params, np.full(4, 1.0))
        assert np.array_equal(moment, np.full((2, 2), 3.0))
    assert {tuple(names) for _, _, names in fake.calls} == {("p", "m")}


def test_the_host_average_copies_and_averages_only_where_it_runs(ranks):
    fake = ranks(2)

    def rank(r):
        given = [np.full((2, 3), float(r)).T]           # not contiguous: copied
        averaged = average_host(["p"], None, True, *given)
        skipped = average_host(["p"], None, False, *given)
        return given, averaged, skipped

    for r, (given, averaged, skipped) in enumerate(fake.run_ranks(rank)):
        assert averaged[0].flags.c_contiguous and np.array_equal(averaged[0], np.full((3, 2), 0.5))
        assert np.array_equal(skipped[0], given[0]) and skipped[0] is not given[0]
        assert np.array_equal(given[0], np.full((3, 2), float(r)))     # the inputs untouched
    assert [kind for _, kind, _ in fake.calls] == ["allreduce", "allreduce"]
