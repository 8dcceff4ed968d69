"""Compression that keeps state between steps, for the Keras ``DistributedOptimizer`` on every
backend: ``Compression.powersgd(...)``, ``Compression.topk(...)``,
``Compression.fp16/bf16(error_feedback=True)``, with the reducers of
:mod:`hvdlite.algorithms.error_feedback` and :mod:`hvdlite.algorithms.powersgd`.

Their state lives in optimizer variables, so it is part of JAX's stateless train state and
of every checkpoint that saves the optimizer: an error buffer per compressed gradient,
PowerSGD's Q per compressed matrix, the step, and the (rank, size) that owns the error
buffers (restored elsewhere, they restart at zero). Each step all of it crosses into the
reducer in one host call (:mod:`hvdlite.algorithms.held_state`) and comes back updated.
"""

import numpy as np

import hvdlite as _hvd
from hvdlite.algorithms.held_state import HeldStateStep, state_plan
from hvdlite.policy import reduce_present, reduction, variable_label

from .backend import bridge


class CompressionState:
    """A reducer and the optimizer variables that hold its state."""

    def __init__(self, name, compression, op, predivide, process_set, what):
        self.name, self.compression, self.what = name, compression, what
        self.process_set = process_set
        self.reducer = compression.make_reducer()
        if getattr(self.reducer, "momentum", 0.0):
            raise NotImplementedError(
                f"{what}: compression={compression!r}: top-k's momentum correction is not "
                f"in hvdlite.keras yet; use momentum=0 (torch: hvdlite.torch has it)")
        self.reducer.process_set = process_set
        self.reduction = reduction(op, predivide, process_set)
        self.built = False

    def build(self, optimizer, variables):
        """Add the state variables for ``variables`` (the optimizer's trainable variables)."""
        if self.built:
            return
        size = self.reducer.set_size()
        self.names = [f"{self.name}.{i}" for i in range(len(variables))]
        self.errors, self.qs = {}, {}
        plan = state_plan(self.reducer, self.names, [v.shape for v in variables],
                          [str(v.dtype) for v in variables], self.compression.FLOATS, size)
        for i, (v, (keeps_error, q0)) in enumerate(zip(variables, plan)):
            if keeps_error:
                self.errors[i] = optimizer.add_variable_from_reference(
                    v, name="hvdlite_error_feedback")
            if q0 is not None:
                self.qs[i] = optimizer.add_variable(
                    q0.shape, initializer=lambda shape, dtype, q0=q0: q0, dtype=str(v.dtype),
                    name="hvdlite_powersgd_q")
        self.step = optimizer.add_variable((), initializer="zeros", dtype="int32",
                                           name="hvdlite_compression_step")
        owner = np.array([_hvd.rank(), _hvd.size()], np.int32)
        self.owner = optimizer.add_variable((2,), initializer=lambda shape, dtype: owner,
                                            dtype="int32", name="hvdlite_compression_owner")
        self.built = True

    def reduce(self, grads, variables, when=None):
        """Reduce a step's gradients through the reducer, updating its state variables."""
        def reduced(present):
            dense = []
            for i in present:
                label = variable_label(variables[i], i)
                dense.append(bridge().dense_gradient(grads[i], label, True, self.what))
                self.compression.check_dtype(str(variables[i].dtype), label, self.what)
            step = HeldStateStep(self.reducer, self.names, present,
                                 {"errors": self.errors, "qs": self.qs}, self.reduction,
                                 (_hvd.rank(), _hvd.size()))
            state, n = step.holders + [self.step, self.owner], len(present)
            out = bridge().host_call(
                step, dense + [v.value for v in state],
                [(tuple(variables[i].shape), str(variables[i].dtype)) for i in present]
                + [(tuple(v.shape), str(v.dtype)) for v in state], when)
            for v, a in zip(state, out[n:]):
                v.assign(a)
            return out[:n]
        return reduce_present(grads, reduced)
