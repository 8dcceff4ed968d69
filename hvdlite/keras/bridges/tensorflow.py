"""The TensorFlow bridge: hvdlite.tensorflow's collectives, which cross into the core
eagerly and from ``tf.function`` graphs (one ``tf.numpy_function`` per grouped request)."""

import numpy as np
import tensorflow as tf

import hvdlite.tensorflow as _hvd_tf
from hvdlite.tensorflow import Compression  # noqa: F401 - part of the bridge interface
from hvdlite.tensorflow.distributed import make_allreduce_grads_fn

from ..labels import process_set_kwargs


def gradient_reducer(name, op, predivide, compression, sparse_as_dense, process_set, what):
    # (Stateful compression never reaches a bridge: hvdlite/keras/stateful_compression.py.)
    reduce_all = make_allreduce_grads_fn(
        name, compression, sparse_as_dense, op, predivide, what=what,
        **process_set_kwargs(make_allreduce_grads_fn, process_set))

    def reduce(grads, variables, when=None):
        if when is None:
            return reduce_all(grads, variables)
        present = [i for i, g in enumerate(grads) if g is not None]
        dense = [tf.convert_to_tensor(grads[i]) for i in present]
        reduced = tf.cond(when, lambda: reduce_all(dense, [variables[i] for i in present]),
                          lambda: dense)
        out = list(grads)
        for i, r in zip(present, reduced):
            out[i] = r
        return out

    return reduce


def host_call(fn, args, out_specs, when=None):
    """See hvdlite.keras.bridges: one stateful ``tf.numpy_function`` (graphs keep it in
    program order), or a direct call eagerly."""
    def host(run, *arrays):
        out = fn(bool(run), *[np.array(a, copy=True) for a in arrays])
        return [np.asarray(o, dtype=d).reshape(s) for o, (s, d) in zip(out, out_specs)]

    run = tf.constant(True) if when is None else tf.convert_to_tensor(when)
    args = [tf.convert_to_tensor(a) for a in args]
    if tf.executing_eagerly():
        return [tf.convert_to_tensor(o) for o in host(run.numpy(), *[a.numpy() for a in args])]
    out = tf.numpy_function(host, [run] + args, [tf.as_dtype(d) for _, d in out_specs],
                            stateful=True, name="hvdlite_host_call")
    for o, (s, _) in zip(out, out_specs):
        o.set_shape(s)
    return list(out)


def dense_gradient(g, label, sparse_as_dense, what):
    if isinstance(g, tf.IndexedSlices):
        if not sparse_as_dense:
            raise ValueError(f"{what}: the gradient of '{label}' is a tf.IndexedSlices; "
                             f"backward_passes_per_step > 1 needs sparse_as_dense=True to "
                             f"accumulate it")
        return tf.convert_to_tensor(g)
    return g


def cond(pred, true_fn, false_fn, variables):
    """tf.cond with variable-updating branches (eagerly: a Python branch)."""
    if tf.executing_eagerly():
        return true_fn() if bool(pred) else false_fn()

    def run(fn, result):
        def branch():
            fn()
            return tf.constant(result)
        return branch
    return tf.cond(pred, run(true_fn, True), run(false_fn, False))


def _tensor(value):
    return value if tf.is_tensor(value) or isinstance(value, tf.IndexedSlices) \
        else tf.constant(value)


def allreduce(value, name, op, prescale_factor, postscale_factor, compression, process_set):
    return _hvd_tf.allreduce(_tensor(value), op=op, prescale_factor=prescale_factor,
                             postscale_factor=postscale_factor, compression=compression,
                             name=name, **process_set_kwargs(_hvd_tf.allreduce, process_set))


def allgather(value, name, process_set):
    return _hvd_tf.allgather(_tensor(value), name=name,
                             **process_set_kwargs(_hvd_tf.allgather, process_set))


def broadcast(value, root_rank, name, process_set):
    return _hvd_tf.broadcast(_tensor(value), root_rank, name=name,
                             **process_set_kwargs(_hvd_tf.broadcast, process_set))


def broadcast_variables(variables, root_rank, name, process_set):
    return _hvd_tf.broadcast_variables(variables, root_rank=root_rank, name=name,
                                       **process_set_kwargs(_hvd_tf.broadcast_variables,
                                                             process_set))
