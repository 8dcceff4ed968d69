"""Local SGD (``local_steps=H``, ``local_sgd_warmup_steps=W``), written once for torch and
Keras. Ranks step on their own gradients and average their parameters (and, with
``average_optimizer_state=True``, the optimizer's floating-point state such as momentum)
after every H-th local step: one all-reduce of the parameters per H steps instead of one of
the gradients per step. The first W steps are synchronous (gradients averaged before the
update): post-local SGD (Lin et al., 2020), which keeps the early, fast-moving phase of
training synchronous. With H=1 and plain SGD (or momentum with ``average_optimizer_state``)
every step equals a synchronous step up to float rounding: the update is linear in the
gradient, so the mean of the ranks' updated parameters is the update with the mean gradient.

The step count may be a Python int or a backend tensor (Keras' compiled steps): ``math``
supplies the comparisons (``keras.ops`` there; Python's operators by default).
"""

import operator

import numpy as np

from hvdlite import ops as _ops
from hvdlite.policy import Average


class PythonMath:
    less = staticmethod(operator.lt)
    greater = staticmethod(operator.gt)
    equal = staticmethod(operator.eq)

    @staticmethod
    def logical_and(a, b):
        return a and b


class LocalSGDSchedule:
    def __init__(self, local_steps, warmup_steps, what):
        if int(local_steps) < 1:
            raise ValueError(f"{what}: local_steps must be >= 1, got {local_steps}")
        if int(warmup_steps) < 0:
            raise ValueError(f"{what}: local_sgd_warmup_steps must be >= 0, got {warmup_steps}")
        self.local_steps, self.warmup_steps = int(local_steps), int(warmup_steps)

    def in_warmup(self, steps_taken, math=PythonMath):
        """Whether the next step (after ``steps_taken``) is a synchronous warm-up step."""
        return math.less(steps_taken, self.warmup_steps)

    def averages_after(self, steps_taken, math=PythonMath):
        """Whether the parameters are averaged once ``steps_taken`` steps are done."""
        local = steps_taken - self.warmup_steps
        return math.logical_and(math.greater(local, 0),
                                math.equal(local % self.local_steps, 0))


def averages_state(dtype, ndim) -> bool:
    """With ``average_optimizer_state``: whether a piece of optimizer state is averaged
    (per-element floating state such as momentum; not step counters or scalars)."""
    return "float" in str(dtype) and ndim > 0


def average(arrays, names, process_set=None):
    """Average ``arrays`` (parameters, optimizer state) over the ranks, in place."""
    kw = {} if process_set is None else {"process_set": process_set}
    _ops.wait_all(_ops.grouped_allreduce_async(arrays, None, names, Average, **kw))


def average_host(names, process_set, run, *arrays):
    """:func:`average` as a host step (Keras' ``bridge().host_call``, with ``names`` and
    ``process_set`` bound): contiguous copies of ``arrays``, averaged where ``run``."""
    arrays = [np.array(a, order="C") for a in arrays]
    if run:
        average(arrays, names, process_set)
    return arrays
