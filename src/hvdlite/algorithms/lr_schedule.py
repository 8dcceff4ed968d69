"""Horovod's learning-rate schedule and warm-up (``LearningRateScheduleCallback``,
``LearningRateWarmupCallback``), free of any framework: which epoch (whole, or fractional
batch by batch) sets the rate, the rate itself, and the factor by which momentum correction
scales the velocities (Goyal et al., 2017). The Keras callbacks apply what it decides.
"""

from typing import Callable, Optional, Union


def multiplier_of(multiplier: Union[float, Callable[[float], float]]):
    """``multiplier`` as a function of the epoch: a number is an exponential decay
    (``multiplier ** epoch``)."""
    if callable(multiplier):
        return multiplier
    return lambda epoch: multiplier ** epoch


def warmup_multiplier(warmup_epochs: float, size: Callable[[], int],
                      steps_per_epoch: Callable[[], int]):
    """Horovod's warm-up from ``1/size`` to 1 over ``warmup_epochs``:
    ``1/size * (epoch' * (size - 1) / warmup_epochs + 1)`` with ``epoch' = epoch + 1 /
    steps_per_epoch``, so the last batch of the warm-up runs at the full rate. ``size`` and
    ``steps_per_epoch`` are asked when the rate is computed (they are known only then)."""
    def multiplier(epoch):
        epoch += 1. / steps_per_epoch()
        n = size()
        return 1. / n * (epoch * (n - 1) / warmup_epochs + 1)
    return multiplier


class LRSchedule:
    """``initial_lr * multiplier(epoch)`` from ``start_epoch`` (inclusive) to ``end_epoch``
    (exclusive): at the first batch of each epoch with ``staircase``, else at every batch
    with the fractional epoch ``epoch + batch / steps_per_epoch``."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True):
        if initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")
        self.initial_lr = float(initial_lr)
        self.multiplier = multiplier_of(multiplier)
        self.start_epoch, self.end_epoch, self.staircase = start_epoch, end_epoch, staircase

    def epoch_to_set(self, epoch: int, batch: int,
                     steps_per_epoch: Optional[int]) -> Optional[float]:
        """The (fractional) epoch whose rate this batch starts with, or None to leave it."""
        if epoch < self.start_epoch or (self.end_epoch is not None and epoch >= self.end_epoch):
            return None
        if self.staircase:
            return epoch if batch == 0 else None
        return epoch + float(batch) / steps_per_epoch

    def rate(self, epoch: float) -> float:
        return self.initial_lr * self.multiplier(epoch)

    def steps_per_epoch(self, given: Optional[int], reported: Optional[int],
                        who: str) -> Optional[int]:
        """The steps per epoch a schedule that changes the rate batch by batch divides by:
        ``given``, else what the training loop ``reported``; a staircase needs none."""
        if self.staircase or given:
            return given
        if reported:
            return reported
        raise ValueError(f"Could not autodetect the number of steps per epoch. Please pass "
                         f"steps_per_epoch to {who}().")


def momentum_ratio(old_lr: float, new_lr: float, momentum, enabled: bool) -> Optional[float]:
    """The factor momentum correction scales the velocities by when the rate goes from
    ``old_lr`` to ``new_lr`` (None: leave them), for an optimizer with a positive numeric
    ``momentum``."""
    if (enabled and isinstance(momentum, (int, float)) and momentum > 0 and old_lr > 0
            and new_lr != old_lr):
        return new_lr / old_lr
    return None
