"""hvdlite.algorithms.lr_schedule: Horovod's learning-rate schedule, warm-up and momentum
correction, as the Keras callbacks apply them."""

import pytest

from hvdlite.algorithms.lr_schedule import (LRSchedule, momentum_ratio, multiplier_of,
                                            warmup_multiplier)


def test_a_number_is_an_exponential_decay():
    assert multiplier_of(0.5)(3) == 0.125
    assert LRSchedule(0.1, 0.5).rate(2) == pytest.approx(0.025)
    assert LRSchedule(0.1, lambda e: e + 1).rate(1.5) == pytest.approx(0.25)


def test_staircase_sets_the_rate_at_each_epochs_first_batch_inside_the_range():
    s = LRSchedule(1.0, 0.5, start_epoch=1, end_epoch=3, staircase=True)
    assert [s.epoch_to_set(e, 0, None) for e in range(4)] == [None, 1, 2, None]
    assert s.epoch_to_set(1, 5, None) is None


def test_smooth_schedule_uses_the_fractional_epoch_at_every_batch():
    s = LRSchedule(1.0, 0.5, staircase=False)
    assert s.epoch_to_set(2, 3, 4) == 2.75
    assert s.epoch_to_set(0, 0, 4) == 0.0


def test_warmup_runs_from_one_over_size_to_one():
    size, steps, warmup = 4, 10, 2
    m = warmup_multiplier(warmup, lambda: size, lambda: steps)
    assert m(0) == pytest.approx(1 / size * ((1 / steps) * (size - 1) / warmup + 1))
    # the last batch of the warm-up (epoch 1, batch 9 -> 1.9 + 1/10) runs at the full rate
    assert m(1 + 9 / steps) == pytest.approx(1.0)
    s = LRSchedule(0.8, m, end_epoch=warmup, staircase=False)
    assert s.epoch_to_set(warmup, 0, steps) is None       # after the warm-up: left alone


def test_momentum_ratio_only_for_a_positive_numeric_momentum_and_a_change():
    assert momentum_ratio(0.1, 0.05, 0.9, True) == pytest.approx(0.5)
    assert momentum_ratio(0.1, 0.05, 0.9, False) is None
    assert momentum_ratio(0.1, 0.1, 0.9, True) is None
    assert momentum_ratio(0.0, 0.1, 0.9, True) is None
    assert momentum_ratio(0.1, 0.2, 0.0, True) is None
    assert momentum_ratio(0.1, 0.2, None, True) is None


def test_initial_lr_is_required():
    with pytest.raises(ValueError, match="initial_lr"):
        LRSchedule(None, 0.5)


def test_steps_per_epoch_given_reported_or_refused():
    smooth, stairs = LRSchedule(1.0, 0.5, staircase=False), LRSchedule(1.0, 0.5)
    assert smooth.steps_per_epoch(10, 20, "Cb") == 10
    assert smooth.steps_per_epoch(None, 20, "Cb") == 20
    assert stairs.steps_per_epoch(None, None, "Cb") is None       # a staircase needs none
    with pytest.raises(ValueError, match=r"Please pass steps_per_epoch to Cb\(\)"):
        smooth.steps_per_epoch(None, None, "Cb")
