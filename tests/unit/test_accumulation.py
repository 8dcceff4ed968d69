"""hvdlite.algorithms.accumulation: the backward_passes_per_step countdown."""

import pytest

from hvdlite.algorithms.accumulation import Countdown, GradientAccumulationError, check_passes


def test_completes_after_the_last_pass():
    c = Countdown(3, ["w", "b"])
    assert [c.arrive("w", "w") for _ in range(3)] == [None, None, ("w",)]
    assert c.exhausted("w") and not c.exhausted("b")
    assert c.mid_step()
    c.reset()
    assert not c.mid_step() and not c.exhausted("w")


def test_one_pass_too_many_names_the_parameter():
    c = Countdown(1, [0])
    assert c.arrive(0, "fc.weight")
    with pytest.raises(GradientAccumulationError,
                       match="'fc.weight'.*backward_passes_per_step=1 time "):
        c.arrive(0, "fc.weight")
    with pytest.raises(AssertionError):        # what Horovod raises
        c.too_many("fc.weight")


def test_a_group_completes_with_its_last_member():
    c = Countdown(2, ["a", "b", "c"])
    c.group(["a", "b"])
    assert [c.arrive("a", "a"), c.arrive("b", "b"), c.arrive("a", "a")] == [None, None, None]
    assert c.arrive("b", "b") == ("a", "b")
    assert c.arrive("c", "c") is None and c.arrive("c", "c") == ("c",)
    c.reset()
    assert [c.arrive(k, k) for k in "abab"] == [None, None, None, ("a", "b")]


def test_passes_change_and_are_checked():
    c = Countdown(2)
    c.add("p")
    c.reset(4)
    assert c.passes == 4 and c.left == {"p": 4}
    with pytest.raises(ValueError, match="^backward_passes_per_step must be >= 1, got 0$"):
        check_passes(0)
    with pytest.raises(ValueError, match="^opt: backward_passes_per_step must be >= 1, got -1$"):
        check_passes(-1, "opt")
    with pytest.raises(ValueError):
        c.reset(0)


def test_zero_grad_mid_step_is_refused():
    c = Countdown(2, ["p"])
    c.refuse_zero_grad()                    # nothing arrived yet
    c.arrive("p", "w")
    with pytest.raises(AssertionError, match="race condition"):
        c.refuse_zero_grad()
    c.reset()
    with pytest.raises(AssertionError, match="zero_grad\\(\\) was called after"):
        c.refuse_zero_grad(reducing=True)   # a reduction still in flight


def test_units_are_the_keys_alone_then_the_groups():
    c = Countdown(1)
    for key in range(5):
        c.add(key)
    c.group([3, 1])
    assert c.units() == [(0,), (2,), (4,), (3, 1)]
