"""Local SGD's schedule (``local_steps=H``, ``local_sgd_warmup_steps=W``), written once for
torch and Keras: the first W steps are synchronous (gradients averaged before the update:
post-local SGD, Lin et al., 2020); afterwards each rank steps on its own gradients and the
parameters are averaged after every H-th local step.

The step count may be a Python int or a backend tensor (Keras' compiled steps): ``math``
supplies the comparisons (``keras.ops`` there; Python's operators by default).
"""

import operator


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
