"""Compression that keeps state between steps, for the Keras ``DistributedOptimizer`` on every
backend: ``Compression.powersgd(...)``, ``Compression.topk(...)``,
``Compression.fp16/bf16(error_feedback=True)``.

The algorithms are the framework-free reducers of :mod:`hvdlite.algorithms.powersgd` and
:mod:`hvdlite.algorithms.error_feedback`. Their state lives in optimizer variables, so it is part of
JAX's stateless train state and of every checkpoint that saves the optimizer
(``model.save``, ``hvd.load_model``):

- one error buffer per compressed gradient (what compression has not sent yet);
- PowerSGD's Q per compressed matrix (the same on every rank);
- the reducer's step count, and the (rank, size) that owns the error buffers.

Each step all of it crosses into the reducer in one host call (``bridge().host_call``) and
comes back updated. Error buffers belong to one rank: where the owner saved in a checkpoint
is not this (rank, size), they restart at zero (they hold only the not-yet-sent remainder).
"""

import numpy as np

import hvdlite as _hvd

from . import labels
from .backend import bridge

_FLOATS = ("float32", "float64")


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
        self.reduction = labels.reduction(op, predivide, process_set)
        self.built = False

    def build(self, optimizer, variables):
        """Add the state variables for ``variables`` (the optimizer's trainable variables)."""
        if self.built:
            return
        size = self.reducer.set_size()
        self.names = [f"{self.name}.{i}" for i in range(len(variables))]
        self.errors, self.qs = {}, {}
        for i, v in enumerate(variables):
            if str(v.dtype) not in _FLOATS:
                continue            # refused with a clear error if it ever has a gradient
            shape = tuple(v.shape)
            if self.reducer.keeps_error(shape, size):
                self.errors[i] = optimizer.add_variable_from_reference(
                    v, name="hvdlite_error_feedback")
            q0 = self.reducer.initial_q(self.names[i], shape, np.dtype(str(v.dtype)))
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
        grads = list(grads)
        present = [i for i, g in enumerate(grads) if g is not None]
        if not present:
            return grads
        for i in present:
            grads[i] = bridge().dense_gradient(grads[i], labels.variable_label(variables[i], i),
                                               True, self.what)
            dtype = str(variables[i].dtype)
            if dtype not in _FLOATS:
                raise ValueError(f"{self.what}: the gradient of "
                                 f"{labels.variable_label(variables[i], i)} has dtype {dtype}; "
                                 f"compression={self.compression!r} handles float32 and float64")
        with_error = [i for i in present if i in self.errors]
        with_q = [i for i in present if i in self.qs]
        names = [self.names[i] for i in present]
        reducer, reduction = self.reducer, self.reduction
        n_g, n_e, n_q = len(present), len(with_error), len(with_q)
        me = np.array([_hvd.rank(), _hvd.size()], np.int32)

        def host(run, *arrays):
            gs = list(arrays[:n_g])
            es = list(arrays[n_g:n_g + n_e])
            qs = list(arrays[n_g + n_e:n_g + n_e + n_q])
            step, owner = arrays[-2], arrays[-1]
            if not run:
                return gs + es + qs + [step, owner]
            if not np.array_equal(owner, me):      # restored from another rank or size
                es = [np.zeros_like(e) for e in es]
            err_names = [self.names[i] for i in with_error]
            q_names = [self.names[i] for i in with_q]
            gs = [np.array(g, order="C") for g in gs]
            errors, q_of, out_step = reducer.reduce_with_state(
                gs, names, dict(zip(err_names, es)), dict(zip(q_names, qs)), step, *reduction)
            es = [errors.get(n, e) for n, e in zip(err_names, es)]
            qs = [q_of.get(n, q) for n, q in zip(q_names, qs)]
            return gs + es + qs + [np.asarray(out_step, np.int32), me]

        args = ([grads[i] for i in present] + [self.errors[i].value for i in with_error]
                + [self.qs[i].value for i in with_q] + [self.step.value, self.owner.value])
        specs = ([(tuple(variables[i].shape), str(variables[i].dtype)) for i in present]
                 + [(tuple(self.errors[i].shape), str(self.errors[i].dtype)) for i in with_error]
                 + [(tuple(self.qs[i].shape), str(self.qs[i].dtype)) for i in with_q]
                 + [((), "int32"), ((2,), "int32")])
        out = bridge().host_call(host, args, specs, when)
        for i, r in zip(present, out[:n_g]):
            grads[i] = r
        for i, e in zip(with_error, out[n_g:n_g + n_e]):
            self.errors[i].assign(e)
        for i, q in zip(with_q, out[n_g + n_e:n_g + n_e + n_q]):
            self.qs[i].assign(q)
        self.step.assign(out[-2])
        self.owner.assign(out[-1])
        return grads
