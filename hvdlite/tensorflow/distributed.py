"""Gradient all-reduction shared by ``DistributedGradientTape`` and the Keras
``DistributedOptimizer``: every dense gradient of a step goes to the core in ONE grouped
request (one crossing from a ``tf.function``)."""

import warnings

import tensorflow as tf

import hvdlite as _hvd
from hvdlite.ops import Average, Sum

from .compression import Compression
from .mpi_ops import _allreduce_dense, _sparse_allreduce, check_dtype, resolve_op

_warned_sparse = set()


def _label(variables, i):
    if variables is None or i >= len(variables) or variables[i] is None:
        return f"gradient {i}"
    v = variables[i]
    label = getattr(v, "path", None) or getattr(v, "name", None)
    return f"gradient {i} ({label})" if label else f"gradient {i}"


def make_allreduce_grads_fn(name, compression=Compression.none, sparse_as_dense=False,
                            op=Average, gradient_predivide_factor=1.0, what=None):
    """Return ``allreduce_grads(grads, variables=None) -> list`` with Horovod's semantics.

    * ``None`` gradients stay None.
    * ``tf.IndexedSlices``: densified when ``sparse_as_dense``; otherwise all-gathered as in
      Horovod (a one-time warning suggests ``sparse_as_dense=True``).
    * ``gradient_predivide_factor`` f (op=Average only): gradients are scaled by 1/f before
      the sum and by f/size after it.
    """
    what = what or name
    op = resolve_op(op, None, what)
    if gradient_predivide_factor != 1.0 and op != Average:
        raise ValueError(f"{what}: gradient_predivide_factor is only supported with "
                         f"op=Average")
    if gradient_predivide_factor <= 0:
        raise ValueError(f"{what}: gradient_predivide_factor must be > 0")

    def allreduce_grads(grads, variables=None):
        grads = list(grads)
        variables = None if variables is None else list(variables)
        if op == Average and gradient_predivide_factor != 1.0:
            true_op, prescale = Sum, 1.0 / gradient_predivide_factor
            postscale = gradient_predivide_factor / _hvd.size()
        else:
            true_op, prescale, postscale = op, 1.0, 1.0
        out = [None] * len(grads)
        dense_idx, dense = [], []
        for i, g in enumerate(grads):
            if g is None:
                continue
            if isinstance(g, tf.IndexedSlices):
                if not sparse_as_dense:
                    label = _label(variables, i)
                    if label not in _warned_sparse:
                        _warned_sparse.add(label)
                        warnings.warn(
                            f"{what}: {label} is a tf.IndexedSlices (sparse gradient); "
                            f"all-gathering its rows as Horovod does. Pass "
                            f"sparse_as_dense=True to all-reduce it densely, which is "
                            f"faster unless the rows touched are few.", stacklevel=3)
                    out[i] = _sparse_allreduce(g, op, f"{name}.{i}", what)
                    continue
                g = tf.convert_to_tensor(g)
            g = tf.convert_to_tensor(g)
            check_dtype(g, what, _label(variables, i))
            dense_idx.append(i)
            dense.append(g)
        names = [f"{name}.{i}" for i in dense_idx]
        labels = {n: _label(variables, i) for n, i in zip(names, dense_idx)}
        reduced = _allreduce_dense(dense, true_op, prescale, postscale, compression, names,
                                   what, labels)
        for i, r in zip(dense_idx, reduced):
            out[i] = r
        return out

    return allreduce_grads


class _DistributedGradientTape:
    """Mixed in before the wrapped tape's class: ``gradient`` all-reduces the gradients."""

    def __init__(self, tape, allreduce_grads, persistent=False, watch_accessed_variables=True):
        super().__init__(persistent=persistent,
                         watch_accessed_variables=watch_accessed_variables)
        # Take over what the user's tape recorded.
        self._tape = tape._tape
        self._watched_variables = getattr(tape, "_watched_variables", ())
        self._hvd_allreduce_grads = allreduce_grads

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = super().gradient(target, sources, output_gradients=output_gradients,
                                 unconnected_gradients=unconnected_gradients)
        flat_grads = tf.nest.flatten(grads)
        flat_sources = tf.nest.flatten(sources)
        reduced = self._hvd_allreduce_grads(flat_grads, flat_sources)
        return tf.nest.pack_sequence_as(grads, reduced)


def DistributedGradientTape(gradtape, device_dense='', device_sparse='',
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, name=None):
    """Wrap a ``tf.GradientTape`` so that ``gradient()`` returns all-reduced gradients.

    Use it after recording::

        with tf.GradientTape() as tape:
            loss = ...
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)

    All dense gradients are all-reduced in one grouped request named
    ``<name>.<index>`` (default name "DistributedGradientTape"), eagerly and inside
    ``tf.function`` alike. ``device_dense``/``device_sparse`` are accepted for Horovod
    compatibility and ignored.
    """
    if not isinstance(gradtape, tf.GradientTape):
        raise TypeError(f"hvdlite.tensorflow.DistributedGradientTape expects a "
                        f"tf.GradientTape, got {type(gradtape).__name__}")
    allreduce_grads = make_allreduce_grads_fn(
        name or "DistributedGradientTape", compression, sparse_as_dense, op,
        gradient_predivide_factor, what="DistributedGradientTape")
    cls = type(gradtape.__class__.__name__, (_DistributedGradientTape, gradtape.__class__), {})
    return cls(gradtape, allreduce_grads, persistent=gradtape._persistent,
               watch_accessed_variables=gradtape._watch_accessed_variables)
