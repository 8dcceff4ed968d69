"""Keras ``DistributedOptimizer`` with a compression that keeps state between steps:
``Compression.powersgd(...)``, ``Compression.topk(...)``, ``Compression.fp16/bf16(
error_feedback=True)``.

The algorithms are the framework-free reducers of :mod:`hvdlite.powersgd` and
:mod:`hvdlite.error_feedback`; every dense gradient of a step crosses into them in one
``tf.numpy_function`` (stateful, so graphs keep it in order), as the plain all-reduce does.
The reducer (error buffers, Q, step) lives with the optimizer as ``optimizer.hvdlite_reducer``;
it is not part of Keras' saved variables (a restored model restarts error feedback at zero).
"""

import numpy as np
import tensorflow as tf

import hvdlite as _hvd
from hvdlite.ops import Average, Sum

_FLOATS = (tf.float32, tf.float64)


def make_stateful_reduce_fn(name, compression, op, gradient_predivide_factor, what):
    """``allreduce_grads(grads, variables=None) -> list`` through ``compression``'s reducer."""
    if op not in (Average, Sum):
        raise ValueError(f"{what}: compression={compression!r} supports op=Average or Sum")
    if gradient_predivide_factor <= 0:
        raise ValueError(f"{what}: gradient_predivide_factor must be > 0")
    reducer = compression.make_reducer()

    def allreduce_grads(grads, variables=None):
        grads = list(grads)
        if op == Average and gradient_predivide_factor != 1.0:
            f = gradient_predivide_factor
            reduction = (Sum, 1.0 / f, f / _hvd.size())
        else:
            reduction = (op, 1.0, 1.0)
        out = [None] * len(grads)
        index, dense = [], []
        for i, g in enumerate(grads):
            if g is None:
                continue
            g = tf.convert_to_tensor(g)     # IndexedSlices too: compression needs them dense
            if g.dtype not in _FLOATS:
                raise ValueError(f"{what}: gradient {i} has dtype {g.dtype.name}; "
                                 f"compression={compression!r} handles float32 and float64")
            index.append(i)
            dense.append(g)
        if not dense:
            return out
        names = [f"{name}.{i}" for i in index]

        def run(*arrays):
            work = [np.array(a, copy=True, order="C") for a in arrays]
            reducer.reduce(work, names, *reduction)
            return work

        reduced = tf.numpy_function(run, dense, [g.dtype for g in dense], stateful=True,
                                    name="hvdlite_stateful_compression")
        for i, g, r in zip(index, dense, reduced):
            r.set_shape(g.shape)
            out[i] = r
        return out

    allreduce_grads.reducer = reducer
    return allreduce_grads
