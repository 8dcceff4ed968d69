"""Local SGD for the Keras ``DistributedOptimizer``: ``DistributedOptimizer(opt, local_steps=H)``;
the algorithm and its schedule are :mod:`hvdlite.algorithms.local_sgd`'s, shared with torch.
The step count is an optimizer variable (``hvdlite_local_sgd_steps``): saved with the
optimizer and, on JAX, part of the stateless train state.
"""

from functools import partial

from keras import ops

from hvdlite.algorithms import local_sgd

from .backend import bridge


class LocalSGDState:
    def __init__(self, name, local_steps, warmup_steps, average_state, process_set, what):
        self.schedule = local_sgd.LocalSGDSchedule(local_steps, warmup_steps, what)
        self.name, self.what, self.process_set = name, what, process_set
        self.average_state = bool(average_state)
        self.steps = None

    def build(self, optimizer):
        if self.steps is None:
            self.steps = optimizer.add_variable((), initializer="zeros", dtype="int32",
                                                name="hvdlite_local_sgd_steps")

    def update(self, optimizer, base_apply, reduce, grads, variables, when=None):
        """Warm-up: reduce then apply; afterwards apply locally and average every H steps."""
        warm = self.schedule.in_warmup(self.steps.value, ops)
        grads = reduce(grads, variables, when=warm if when is None else
                       ops.logical_and(when, warm))
        base_apply(grads, variables)
        self.steps.assign(self.steps + 1)
        due = self.schedule.averages_after(self.steps.value, ops)
        self.average(optimizer, variables, due if when is None else ops.logical_and(when, due))

    def average(self, optimizer, variables, when=None):
        """Average ``variables`` (and the optimizer's float slots, if asked) where ``when``."""
        tensors = list(variables)
        if self.average_state:
            own = {id(v) for v in tensors} | {id(optimizer.iterations)}
            if self.steps is not None:
                own.add(id(self.steps))
            tensors += [v for v in optimizer.variables if id(v) not in own and
                        local_sgd.averages_state(v.dtype, len(v.shape)) and "hvdlite" not in v.name]
        names = [f"{self.name}.localsgd.{i}" for i in range(len(tensors))]
        out = bridge().host_call(partial(local_sgd.average_host, names, self.process_set),
                                 [t.value for t in tensors],
                                 [(tuple(t.shape), str(t.dtype)) for t in tensors], when)
        for t, o in zip(tensors, out):
            t.assign(o)
