"""Core requests on TensorFlow tensors, eagerly and inside graphs, with Horovod's gradients
(:data:`hvdlite.policy.GRADIENTS`): each checks its tensors, names its requests and crosses
into the core through :func:`hvdlite.convert.tf_tensors.cross`. ``hvdlite.tensorflow`` adds
Horovod's signatures on top; the Keras TensorFlow bridge calls these as they are. Errors are
:mod:`hvdlite.convert.tf_errors` classes (hvdlite's and ``tf.errors``' at once).

Names: a ``name`` given is used as is (grouped calls append ``.0``, ``.1``, ...).
Otherwise eagerly the core numbers calls; in a graph a name is fixed when the graph is
built, ``tf.<kind>.noname.<k>`` with ``k`` counting that graph's collectives of that kind in
that process set, so ranks that build the same code agree without depending on
TensorFlow's op names, also where only some of them build a set's collectives."""

import warnings

import numpy as np
import tensorflow as tf

from hvdlite import ops as _ops, policy
from hvdlite.basics import rank
from hvdlite.exceptions import HvdliteError, raise_replaced
from hvdlite.policy import GRADIENTS, Average, Sum, resolve_op, wire_format
from hvdlite.policy.options import is_compressed
from hvdlite.process_sets import global_process_set

from . import dlpack_arrays, tf_errors, tf_tensors
from .tf_tensors import (aligned_empty_like, as_array, counters_of, grad_names,
                         outermost_function_graph, result_arrays, scaled, tape_may_record)


def cross(start, inputs, touts, shapes, label):
    """:func:`hvdlite.convert.tf_tensors.cross`, raising :mod:`tf_errors` classes."""
    return tf_tensors.cross(start, inputs, touts, shapes, label, tf_errors.native)


def process_set_or_global(process_set):
    return global_process_set if process_set is None else process_set


def describe(tensor, name=None):
    """How error messages name a tensor: the name given, the graph name, or its shape."""
    if name is not None:
        return f"'{name}'"
    try:
        graph_name = tensor.name  # raises in eager mode
    except (AttributeError, ValueError):
        graph_name = None
    shape = getattr(tensor, "shape", None)
    shape = shape.as_list() if hasattr(shape, "as_list") and shape.rank is not None else shape
    return f"'{graph_name}' (shape {shape})" if graph_name else f"tensor of shape {shape}"


def check_dtype(tensor, what, name=None):
    """Raise a clear error naming ``tensor`` unless the core supports its dtype."""
    dtype = getattr(tensor.dtype, "base_dtype", tensor.dtype)
    check_arg(lambda d: policy.check_dtype(d, f"hvdlite.tensorflow.{what}",
                                           describe(tensor, name)), dtype.name)


def check_arg(check, value):
    """``check(value)`` (an hvdlite check), raising the TF-native class of its error."""
    try:
        return check(value)
    except HvdliteError as e:
        raise_replaced(e, tf_errors.native(e), chain=False)


def resolve_tf_op(op, average, what):
    return check_arg(lambda o: resolve_op(o, average, f"hvdlite.tensorflow.{what}"), op)


def op_name(kind, name=None, process_set=None):
    """The request name: ``name`` if given; None eagerly (hvdlite.ops numbers calls); in a
    graph a name fixed at build time, counted per outermost graph and process set."""
    if name is not None:
        return str(name)
    if tf.executing_eagerly():
        return None
    graph = outermost_function_graph(tf.compat.v1.get_default_graph())
    counters = counters_of(graph)
    return policy.auto_name(f"tf.{kind}", None, check_arg(_ops.process_set_id, process_set),
                            counters)


def request_names(base, n, kind, process_set, grouped=True):
    """Request names of a call's tensors: ``base`` for a single-tensor call, ``base.i`` for
    a grouped one; None eagerly without a name (hvdlite.ops numbers them)."""
    base = op_name(kind, base, process_set)
    if base is None:
        return None
    return [f"{base}.{i}" for i in range(n)] if grouped else [base]


def with_gradient(forward, grad_fn, tensors):
    """Apply ``forward(list) -> list`` with ``grad_fn(inputs, outputs, dys) -> dxs``."""
    if not (tape_may_record() and any(t.dtype.is_floating or t.dtype.is_complex
                                        for t in tensors)):
        return forward(list(tensors))

    @tf.custom_gradient
    def _fn(*xs):
        ys = forward(list(xs))

        def _grad(*dys):
            dys = [tf.zeros_like(y) if d is None else d for d, y in zip(dys, ys)]
            return grad_fn(list(xs), ys, dys)
        return ys, _grad

    return list(_fn(*tensors))


# ----------------------------------------------------------------------- the crossings

def _allreduce_cross(tensors, op, prescale, postscale, wire, names, process_set, labels=None):
    if tf.executing_eagerly() and dlpack_arrays.on_one_gpu(tensors):
        # GPU tensors stay on the device: staged by the core, no numpy copy each way.
        try:
            return dlpack_arrays.grouped_allreduce(tf_tensors.GPU_TENSORS, tensors, names, op,
                                                   prescale, postscale, wire, process_set)
        except HvdliteError as e:
            raise_replaced(e, tf_errors.native(policy.with_labels(e, labels)), chain=False)

    def fn(*arrays):
        arrays = [as_array(a) for a in arrays]
        outs = [aligned_empty_like(a) for a in arrays]
        work = _ops.grouped_allreduce_async(arrays, outs, names, op, prescale, postscale,
                                            wire, process_set)

        def wait():
            try:
                work.wait()
            except HvdliteError as e:
                raise_replaced(e, policy.with_labels(e, labels))
            return outs
        return wait
    return cross(fn, tensors, [t.dtype for t in tensors], [t.shape for t in tensors],
                 "HvdliteAllreduce")


def allgather_cross(tensors, names, process_set):
    def fn(*arrays):
        return _ops.grouped_allgather_async([as_array(a) for a in arrays], names, process_set,
                                            result_arrays).wait
    shapes = [tf.TensorShape([None]).concatenate(t.shape[1:]) for t in tensors]
    return cross(fn, tensors, [t.dtype for t in tensors], shapes, "HvdliteAllgather")


def _broadcast_cross(tensors, root_rank, names, process_set, label="HvdliteBroadcast"):
    def fn(*arrays):
        arrays = [as_array(a) for a in arrays]
        outs = [aligned_empty_like(a) for a in arrays]
        work = _ops.grouped_broadcast_async(arrays, root_rank, outs, names, process_set)
        return lambda: (work.wait(), outs)[1]
    return cross(fn, tensors, [t.dtype for t in tensors], [t.shape for t in tensors], label)


# ------------------------------------------------------------------------- allreduce

def allreduce_dense(tensors, op, prescale, postscale, compression, names, what,
                    process_set=None, labels=None):
    """All-reduce dense tensors in one crossing, applying ``compression``; differentiable."""
    for i, t in enumerate(tensors):
        check_dtype(t, what, None if names is None else names[i])
    send, ctxs, wire = list(tensors), [None] * len(tensors), None
    formats = [wire_format(compression, t.dtype.name) for t in tensors]
    for i, (w, python_side) in enumerate(formats):
        wire = wire or w
        if python_side:
            send[i], ctxs[i] = compression.compress(tensors[i])
            check_dtype(send[i], what + " (compressed)", None if names is None else names[i])
    reduced = allreduce_differentiable(send, op, prescale, postscale, wire, names,
                                       process_set, labels)
    return [compression.decompress(r, c) if python_side else r
            for r, c, (_, python_side) in zip(reduced, ctxs, formats)]


def allreduce_differentiable(tensors, op, prescale, postscale, wire, names, process_set,
                             labels=None):
    if not tensors:
        return []
    if names is None and not tf.executing_eagerly():
        names = request_names(None, len(tensors), "allreduce", process_set)
    rule = GRADIENTS["allreduce"]

    def forward(xs):
        return _allreduce_cross(xs, op, prescale, postscale, wire, names, process_set, labels)

    def grad(xs, ys, dys):
        return allreduce_differentiable(dys, rule.op(op), prescale, postscale, wire,
                                        grad_names(names), process_set)

    return with_gradient(forward, grad, tensors)


def allreduce_sparse(slices, op, name, what, process_set=None):
    """Horovod's sparse all-reduce: all-gather the rows (values and indices) of every rank."""
    divisor = policy.gathered_rows_divisor(
        op, process_set_or_global(process_set).size(),
        f"hvdlite.tensorflow.{what}: {describe(slices.values, name)} is a tf.IndexedSlices "
        f"(sparse gradient)", "its rows are all-gathered; pass sparse_as_dense=True (or "
        "tf.convert_to_tensor it) to reduce it densely", tf_errors.HvdliteUnsupportedError)
    check_dtype(slices.values, what, name)
    values, indices = allgather_group([slices.values, slices.indices],
                                      op_name("sparse_allreduce", name, process_set),
                                      "grouped_allgather", process_set)
    if divisor != 1:
        values = values / tf.cast(divisor, values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def check_sparse_scales(prescale_factor, postscale_factor, what):
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise tf_errors.HvdliteUnsupportedError(
            f"hvdlite.tensorflow.{what}: prescale_factor and postscale_factor are not "
            f"supported for tf.IndexedSlices (as in Horovod); scale the values yourself or "
            f"pass a dense tensor")


def allreduce(tensor, op, prescale_factor, postscale_factor, compression, name, process_set):
    """All-reduce one tensor (``op`` resolved); ``tf.IndexedSlices`` as Horovod does."""
    if isinstance(tensor, tf.IndexedSlices):
        check_sparse_scales(prescale_factor, postscale_factor, "allreduce")
        return allreduce_sparse(tensor, op, name, "allreduce", process_set)
    tensor = tf.convert_to_tensor(tensor)
    return allreduce_dense([tensor], op, prescale_factor, postscale_factor, compression,
                           None if name is None else [str(name)], "allreduce", process_set)[0]


_warned_sparse = set()


def _label(variables, i):
    if variables is None or i >= len(variables) or variables[i] is None:
        return f"gradient {i}"
    v = variables[i]
    label = getattr(v, "path", None) or getattr(v, "name", None)
    return f"gradient {i} ({label})" if label else f"gradient {i}"


def make_allreduce_grads_fn(name, compression, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, what=None,
                            process_set=global_process_set):
    """Return ``allreduce_grads(grads, variables=None) -> list`` with Horovod's semantics.

    * ``None`` gradients stay None.
    * ``tf.IndexedSlices``: densified when ``sparse_as_dense``; otherwise all-gathered as in
      Horovod (a one-time warning suggests ``sparse_as_dense=True``).
    * ``gradient_predivide_factor`` f (op=Average only): gradients are scaled by 1/f before
      the sum and by f/size after it.
    """
    what = what or name
    op = resolve_tf_op(op, None, what)
    policy.check_predivide(op, gradient_predivide_factor, what)

    def allreduce_grads(grads, variables=None):
        grads = list(grads)
        variables = None if variables is None else list(variables)
        size = process_set_or_global(process_set).size()
        true_op, prescale, postscale = policy.predivide(op, gradient_predivide_factor, size)
        out = [None] * len(grads)
        dense_idx, dense = [], []
        for i, g in enumerate(grads):
            if g is None:
                continue
            if isinstance(g, tf.IndexedSlices) and not sparse_as_dense:
                label = _label(variables, i)
                if label not in _warned_sparse:
                    _warned_sparse.add(label)
                    warnings.warn(
                        f"{what}: {label} is a tf.IndexedSlices (sparse gradient); "
                        f"all-gathering its rows as Horovod does. Pass sparse_as_dense=True "
                        f"to all-reduce it densely, which is faster unless the rows touched "
                        f"are few.", stacklevel=3)
                # the predivide factors only split Average's 1/size: the gathered rows
                # divided by size are the same result
                out[i] = allreduce_sparse(g, op, f"{name}.{i}", what, process_set)
                continue
            g = tf.convert_to_tensor(g)
            check_dtype(g, what, _label(variables, i))
            dense_idx.append(i)
            dense.append(g)
        names = [f"{name}.{i}" for i in dense_idx]
        labels = {n: _label(variables, i) for n, i in zip(names, dense_idx)}
        reduced = allreduce_dense(dense, true_op, prescale, postscale, compression, names,
                                  what, process_set, labels)
        for i, r in zip(dense_idx, reduced):
            out[i] = r
        return out

    return allreduce_grads


# ------------------------------------------------------------------ allgather, broadcast

def allgather_group(tensors, name, what, process_set, grouped=True):
    """All-gather ``tensors`` in one crossing; a scalar is gathered as a vector of one
    element per rank. Differentiable."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    for t in tensors:
        check_dtype(t, what, name)
    xs = [tf.reshape(t, [1]) if t.shape.rank == 0 else t for t in tensors]
    names = request_names(name, len(xs), "allgather", process_set, grouped)
    ps = process_set_or_global(process_set)

    def forward(inputs):
        return allgather_cross(inputs, names, process_set)

    def grad(inputs, ys, dys):
        rule = GRADIENTS["allgather"]
        backward_names = grad_names(names)
        reduced = allreduce_differentiable(dys, rule.op(Sum), 1.0, 1.0, None, backward_names,
                                           process_set)
        dims = tf.stack([tf.shape(x, out_type=tf.int64)[0] for x in inputs])
        sizes_name = None if backward_names is None else [f"{backward_names[0]}_sizes"]
        sizes = allgather_cross([tf.reshape(dims, [1, -1])], sizes_name, process_set)[0]
        start = tf.reduce_sum(sizes[:ps.rank()], axis=0)
        return [g[start[i]:start[i] + dims[i]] for i, g in enumerate(reduced)]

    return with_gradient(forward, grad, xs)


def broadcast(tensor, root_rank, name, process_set):
    """Every rank gets ``root_rank``'s ``tensor``. Differentiable."""
    tensor = tf.convert_to_tensor(tensor)
    check_dtype(tensor, "broadcast", name)
    root_rank = check_arg(_ops.root_rank_arg, root_rank)
    names = request_names(name, 1, "broadcast", process_set, grouped=False)
    rule = GRADIENTS["broadcast"]

    def forward(xs):
        return _broadcast_cross(xs, root_rank, names, process_set)

    def grad(xs, ys, dys):
        g = allreduce_differentiable([dys[0]], rule.op(Sum), 1.0, 1.0, None,
                                     grad_names(names), process_set)[0]
        return [g if rank() == root_rank else g * 0]     # roots are global ranks

    return with_gradient(forward, grad, [tensor])[0]


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Overwrite ``variables`` with ``root_rank``'s values (one crossing for all of them);
    returns their new values."""
    # one variable is iterable too (over its rows): take it as a list of one, not its rows
    variables = [variables] if isinstance(variables, tf.Variable) else list(variables)
    values = [tf.convert_to_tensor(v) for v in variables]
    for v, t in zip(variables, values):
        check_dtype(t, "broadcast_", getattr(v, "name", None))
    new = _broadcast_cross(values, int(root_rank),
                           request_names(name, len(values), "broadcast_", process_set),
                           process_set, "HvdliteBroadcastInplace")
    assigns = [v.assign(n) for v, n in zip(variables, new)]
    if tf.executing_eagerly():
        return [v.read_value() if hasattr(v, "read_value") else tf.convert_to_tensor(v)
                for v in variables]
    with tf.control_dependencies([a for a in assigns if a is not None]):
        return [tf.identity(n) for n in new]


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False,
                        name=None):
    """Assign ``root_rank``'s values to ``variables`` on every rank.

    Works for ``tf.Variable`` and Keras variables, eagerly (returns None) and inside a
    graph (returns the grouped assign op). All variables go to the core together, so they
    negotiate in the same round. ``inplace`` is accepted for Horovod compatibility (the
    values are always assigned in place).
    """
    variables = list(variables)
    if not variables:
        return None if tf.executing_eagerly() else tf.no_op()
    values = broadcast_(variables, root_rank, name=name or None, process_set=process_set)
    return None if tf.executing_eagerly() else tf.group(*values)


# -------------------------------------------------------------------------- alltoall

def alltoall(tensor, splits, name, process_set):
    """(the rows received, in rank order; the number of rows received from each rank, int32)
    for ``splits[i]`` rows of ``tensor`` sent to rank i (default: equal parts).
    Differentiable: the gradient goes back along the same routes."""
    tensor = tf.convert_to_tensor(tensor)
    check_dtype(tensor, "alltoall", name)
    has_splits = splits is not None
    if has_splits and tf.is_tensor(splits) and not splits.dtype.is_integer:
        raise tf_errors.HvdliteInvalidArgumentError(
            f"hvdlite.tensorflow.alltoall: splits must be integers, got a "
            f"{splits.dtype.name} tensor")
    if has_splits and not tf.is_tensor(splits):
        check_arg(_ops.splits_arg, np.asarray(splits).reshape(-1).tolist())  # no cast of 1.5 to 1
    splits_t = tf.cast(tf.convert_to_tensor(splits), tf.int32) if has_splits \
        else tf.constant([], dtype=tf.int32)
    aname = op_name("alltoall", name, process_set)
    received = []

    def fn(arr, spl):
        spl = [int(s) for s in np.asarray(spl).reshape(-1)]

        def finish(results):
            rs = results[0].received_splits
            return [as_array(results[0].array()),
                    np.asarray(rs if rs is not None else [], dtype=np.int32)]
        return _ops.alltoall_async(as_array(arr), spl or None, aname, process_set,
                                   finish).wait

    def forward(xs):
        out, rsplits = cross(fn, [xs[0], splits_t], [tensor.dtype, tf.int32],
                             [tf.TensorShape([None]).concatenate(tensor.shape[1:]),
                              tf.TensorShape([None])], "HvdliteAlltoall")
        received.append(rsplits)
        return [out]

    def grad(xs, ys, dys):
        backward_names = None if aname is None else grad_names([aname])
        return [alltoall(dys[0], received[0],
                         None if backward_names is None else backward_names[0],
                         process_set)[0]]

    out = with_gradient(forward, grad, [tensor])[0]
    return out, received[0]


# --------------------------------------------------------------------- reducescatter

def _reducescatter_cross(tensors, op, prescale, postscale, names, process_set):
    ps = process_set_or_global(process_set)
    member = ps.included()  # outside the set the core's call below gives the error
    shapes = []
    for t in tensors:
        n0 = t.shape[0] if t.shape.rank else None
        rows = (None if n0 is None or not member
                else policy.reducescatter_rows(n0, ps.size(), ps.rank()))
        shapes.append(tf.TensorShape([rows]).concatenate(t.shape[1:]))

    def fn(*arrays):
        return _ops.grouped_reducescatter_async([as_array(a) for a in arrays], names, op,
                                                prescale, postscale, process_set,
                                                result_arrays).wait
    return cross(fn, tensors, [t.dtype for t in tensors], shapes, "HvdliteReducescatter")


def reducescatter_group(tensors, compression, op, name, prescale_factor, postscale_factor,
                        process_set, what, grouped=True):
    """Reduce ``tensors`` over ranks (``op`` not resolved yet) and give each rank its share
    of dimension 0, in one crossing, with ``compression``. Differentiable (Horovod's
    gradient: the all-gather of the incoming gradients, scaled)."""
    op = resolve_tf_op(op, None, what)
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    for t in tensors:
        check_dtype(t, what, name)
        if t.shape.rank == 0:
            raise tf_errors.HvdliteInvalidArgumentError(
                f"hvdlite.tensorflow.{what}: {describe(t, name)} is a scalar; reducescatter "
                f"splits dimension 0 and needs at least one dimension")
    python_side = is_compressed(compression)
    tensors, ctxs = policy.compressed(compression, tensors, python_side)
    names = request_names(name, len(tensors), "reducescatter", process_set, grouped)

    def forward(xs):
        return _reducescatter_cross(xs, op, prescale_factor, postscale_factor, names,
                                    process_set)

    def grad(xs, ys, dys):
        scale = policy.gradient_scale("reducescatter", op, prescale_factor, postscale_factor,
                                       process_set_or_global(process_set).size())
        gnames = grad_names(names)
        return [allgather_group([g], None if gnames is None else gnames[i], what,
                                process_set, grouped=False)[0]
                for i, g in enumerate(scaled(dys, scale))]

    return policy.decompressed(compression, with_gradient(forward, grad, tensors), ctxs,
                               python_side)
