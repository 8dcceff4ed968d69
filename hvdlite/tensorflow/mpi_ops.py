"""TensorFlow collectives over the hvdlite C++ core, eagerly and inside graphs.

How a TensorFlow tensor reaches the core
----------------------------------------
* Eagerly, ``tensor.numpy()`` of a CPU tensor is a zero-copy view; the core writes its
  result into a fresh 64-byte-aligned numpy array that TensorFlow then adopts without a
  copy.
* Inside a ``tf.function`` every collective is ONE stateful ``tf.numpy_function`` op: it
  enqueues the request(s), waits for them (the core drops the GIL while waiting) and
  returns the results, whose shapes are then set on the graph tensors. ``tf.function``'s
  automatic control dependencies run stateful ops in program order, so every rank submits
  its collectives in the same order. A TF1-style graph has no such order: there a
  collective is an op that submits it and an op that waits for it inside the graph's
  ``tf.CriticalSection`` (Note [TF1 collectives: submit, then wait in a critical
  section]), so TensorFlow's inter-op threads are never all waiting; fetching one
  collective runs only it.
* XLA cannot compile ``tf.numpy_function``: compile Keras models with
  ``jit_compile=False`` on machines with a GPU (on CPU-only machines Keras already does).

Names
-----
A ``name=`` you pass is used as is (grouped calls append ``.0``, ``.1``, ...). Otherwise:
eagerly the core generates names in call order; in a graph a name is fixed when the graph
is built, ``tf.<kind>.noname.<k>`` with ``k`` counting that graph's collectives of that kind
in that process set, so ranks that build the same code agree without depending on
TensorFlow's op names, also where only some of them build a set's collectives.

Errors and gradients
--------------------
Errors are :mod:`hvdlite.tensorflow.errors` classes (hvdlite's and ``tf.errors``' at once).
Gradients follow :data:`hvdlite.policy.GRADIENTS` (Horovod's rules, shared with torch).
"""

import numpy as np
import tensorflow as tf

from hvdlite import _core, policy, ops as _ops
from hvdlite.policy import (GRADIENTS, Adasum, Average, Max, Min, Product, Sum,  # noqa: F401
                             resolve_op, wire_format)
from hvdlite.exceptions import HvdliteError, raise_replaced
from hvdlite.process_sets import (ProcessSet, add_process_set,  # noqa: F401
                                  global_process_set, remove_process_set)

from hvdlite.convert import dlpack_arrays, tf_tensors
from hvdlite.convert.tf_tensors import (aligned_empty_like, as_array,  # noqa: F401
                                        grad_names, graph_counters, outermost_function_graph,
                                        result_arrays, scaled, tape_may_record)

from . import errors as _errors
from .compression import Compression


def cross(start, inputs, touts, shapes, label):
    """:func:`hvdlite.convert.tf_tensors.cross`, raising hvdlite.tensorflow's errors."""
    return tf_tensors.cross(start, inputs, touts, shapes, label, _errors.native)

__all__ = ["allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast",
           "broadcast_", "alltoall", "reducescatter", "grouped_reducescatter", "barrier",
           "join", "rank_op", "size_op", "local_rank_op", "local_size_op",
           "process_set_included_op", "Average", "Sum", "Adasum", "Min", "Max", "Product"]


def process_set_or_global(process_set):
    return global_process_set if process_set is None else process_set


# ----------------------------------------------------------------------------- helpers

def _describe(tensor, name=None):
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
    try:
        policy.check_dtype(dtype.name, f"hvdlite.tensorflow.{what}", _describe(tensor, name))
    except HvdliteError as e:
        raise_replaced(e, _errors.native(e), chain=False)


def _check_arg(check, value):
    """An hvdlite.ops argument check, raising the TF-native class of its error."""
    try:
        return check(value)
    except HvdliteError as e:
        raise_replaced(e, _errors.native(e), chain=False)


def resolve_tf_op(op, average, what):
    try:
        return resolve_op(op, average, f"hvdlite.tensorflow.{what}")
    except HvdliteError as e:
        raise_replaced(e, _errors.native(e), chain=False)


def op_name(kind, name=None, process_set=None):
    """The request name: ``name`` if given; None eagerly (hvdlite.ops numbers calls); in a
    graph a name fixed at build time, counted per outermost graph and process set."""
    if name is not None:
        return str(name)
    if tf.executing_eagerly():
        return None
    graph = outermost_function_graph(tf.compat.v1.get_default_graph())
    counters = graph_counters.setdefault(graph, {})
    return policy.auto_name(f"tf.{kind}", None, _check_arg(_ops.process_set_id, process_set),
                             counters)


def _names(base, n, kind, process_set, grouped=True):
    """Request names of a call's tensors: ``base`` for a single-tensor call, ``base.i`` for
    a grouped one; None eagerly without a name (hvdlite.ops numbers them)."""
    base = op_name(kind, base, process_set)
    if base is None:
        return None
    return [f"{base}.{i}" for i in range(n)] if grouped else [base]


def _with_gradient(forward, grad_fn, tensors):
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
            raise_replaced(e, _errors.native(policy.with_labels(e, labels)), chain=False)

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


def _allgather_cross(tensors, names, process_set):
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
    reduced = _allreduce_differentiable(send, op, prescale, postscale, wire, names,
                                        process_set, labels)
    return [compression.decompress(r, c) if python_side else r
            for r, c, (_, python_side) in zip(reduced, ctxs, formats)]


def _allreduce_differentiable(tensors, op, prescale, postscale, wire, names, process_set,
                              labels=None):
    if not tensors:
        return []
    if names is None and not tf.executing_eagerly():
        names = _names(None, len(tensors), "allreduce", process_set)
    rule = GRADIENTS["allreduce"]

    def forward(xs):
        return _allreduce_cross(xs, op, prescale, postscale, wire, names, process_set, labels)

    def grad(xs, ys, dys):
        return _allreduce_differentiable(dys, rule.op(op), prescale, postscale, wire,
                                         grad_names(names), process_set)

    return _with_gradient(forward, grad, tensors)


def allreduce_sparse(slices, op, name, what, process_set=None):
    """Horovod's sparse all-reduce: all-gather the rows (values and indices) of every rank."""
    policy.require_average_or_sum(
        op, f"hvdlite.tensorflow.{what}: {_describe(slices.values, name)} is a tf.IndexedSlices "
        f"(sparse gradient)", "its rows are all-gathered; pass sparse_as_dense=True (or "
        "tf.convert_to_tensor it) to reduce it densely", _errors.HvdliteUnsupportedError)
    check_dtype(slices.values, what, name)
    values, indices = grouped_allgather([slices.values, slices.indices],
                                        name=op_name("sparse_allreduce", name, process_set),
                                        process_set=process_set)
    if op == Average:
        values = values / tf.cast(process_set_or_global(process_set).size(), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def _check_sparse_scales(prescale_factor, postscale_factor, what):
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise _errors.HvdliteUnsupportedError(
            f"hvdlite.tensorflow.{what}: prescale_factor and postscale_factor are not "
            f"supported for tf.IndexedSlices (as in Horovod); scale the values yourself or "
            f"pass a dense tensor")


def allreduce(tensor, average=None, device_dense='', device_sparse='',
              compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, name=None, process_set=global_process_set,
              ignore_name_scope=False):
    """All-reduce ``tensor`` over all ranks (default op: Average), as ``hvd.allreduce``.

    ``tf.IndexedSlices`` are reduced as in Horovod by all-gathering their rows (Average
    divides the values by the number of ranks; other ops and scale factors raise
    NotImplementedError). ``device_dense``/``device_sparse``/``ignore_name_scope`` are
    accepted for Horovod compatibility.
    """
    op = resolve_tf_op(op, average, "allreduce")
    if isinstance(tensor, tf.IndexedSlices):
        _check_sparse_scales(prescale_factor, postscale_factor, "allreduce")
        return allreduce_sparse(tensor, op, name, "allreduce", process_set)
    tensor = tf.convert_to_tensor(tensor)
    return allreduce_dense([tensor], op, prescale_factor, postscale_factor, compression,
                            None if name is None else [str(name)], "allreduce", process_set)[0]


def grouped_allreduce(tensors, average=None, device_dense='', device_sparse='',
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """All-reduce a list of tensors in one request group (one crossing into the core)."""
    op = resolve_tf_op(op, average, "grouped_allreduce")
    tensors = list(tensors)
    names = policy.group_names(name, len(tensors)) if name is not None else None
    out, dense_idx = [None] * len(tensors), []
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            _check_sparse_scales(prescale_factor, postscale_factor, "grouped_allreduce")
            out[i] = allreduce_sparse(t, op, None if names is None else names[i],
                                       "grouped_allreduce", process_set)
        else:
            dense_idx.append(i)
    dense = [tf.convert_to_tensor(tensors[i]) for i in dense_idx]
    reduced = allreduce_dense(dense, op, prescale_factor, postscale_factor, compression,
                               None if names is None else [names[i] for i in dense_idx],
                               "grouped_allreduce", process_set)
    for i, r in zip(dense_idx, reduced):
        out[i] = r
    return out


# ------------------------------------------------------------------------- allgather

def _allgather_group(tensors, name, what, process_set, grouped=True):
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    for t in tensors:
        check_dtype(t, what, name)
    # a scalar is gathered as a vector of one element per rank
    xs = [tf.reshape(t, [1]) if t.shape.rank == 0 else t for t in tensors]
    names = _names(name, len(xs), "allgather", process_set, grouped)
    ps = process_set_or_global(process_set)

    def forward(inputs):
        return _allgather_cross(inputs, names, process_set)

    def grad(inputs, ys, dys):
        rule = GRADIENTS["allgather"]
        backward_names = grad_names(names)
        reduced = _allreduce_differentiable(dys, rule.op(Sum), 1.0, 1.0, None, backward_names,
                                            process_set)
        dims = tf.stack([tf.shape(x, out_type=tf.int64)[0] for x in inputs])
        sizes_name = None if backward_names is None else [f"{backward_names[0]}_sizes"]
        sizes = _allgather_cross([tf.reshape(dims, [1, -1])], sizes_name, process_set)[0]
        start = tf.reduce_sum(sizes[:ps.rank()], axis=0)
        return [g[start[i]:start[i] + dims[i]] for i, g in enumerate(reduced)]

    return _with_gradient(forward, grad, xs)


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenate every rank's ``tensor`` along dimension 0 (first dims may differ).
    A scalar is gathered as a vector of one element per rank."""
    return _allgather_group([tensor], name, "allgather", process_set, grouped=False)[0]


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """All-gather a list of tensors as one group; returns a list."""
    tensors = list(tensors)
    return _allgather_group(tensors, name, "grouped_allgather", process_set) if tensors else []


# ------------------------------------------------------------------------- broadcast

def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """Every rank gets ``root_rank``'s ``tensor``."""
    tensor = tf.convert_to_tensor(tensor)
    check_dtype(tensor, "broadcast", name)
    root_rank = _check_arg(_ops.root_rank_arg, root_rank)
    names = _names(name, 1, "broadcast", process_set, grouped=False)
    rule = GRADIENTS["broadcast"]

    def forward(xs):
        return _broadcast_cross(xs, root_rank, names, process_set)

    def grad(xs, ys, dys):
        g = _allreduce_differentiable([dys[0]], rule.op(Sum), 1.0, 1.0, None,
                                      grad_names(names), process_set)[0]
        from hvdlite import rank
        return [g if rank() == root_rank else g * 0]     # roots are global ranks

    return _with_gradient(forward, grad, [tensor])[0]


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Overwrite ``variables`` with ``root_rank``'s values (one crossing for all of them);
    returns their new values."""
    # one variable is iterable too (over its rows): take it as a list of one, not its rows
    variables = [variables] if isinstance(variables, tf.Variable) else list(variables)
    values = [tf.convert_to_tensor(v) for v in variables]
    for v, t in zip(variables, values):
        check_dtype(t, "broadcast_", getattr(v, "name", None))
    new = _broadcast_cross(values, int(root_rank),
                           _names(name, len(values), "broadcast_", process_set),
                           process_set, "HvdliteBroadcastInplace")
    assigns = [v.assign(n) for v, n in zip(variables, new)]
    if tf.executing_eagerly():
        return [v.read_value() if hasattr(v, "read_value") else tf.convert_to_tensor(v)
                for v in variables]
    with tf.control_dependencies([a for a in assigns if a is not None]):
        return [tf.identity(n) for n in new]


# -------------------------------------------------------------------------- alltoall

def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Send ``splits[i]`` rows of ``tensor`` to rank i (default: equal parts).

    Returns the received rows concatenated in rank order, and, when ``splits`` is given,
    also the number of rows received from each rank (int32), as Horovod does.
    """
    tensor = tf.convert_to_tensor(tensor)
    check_dtype(tensor, "alltoall", name)
    has_splits = splits is not None
    if has_splits and tf.is_tensor(splits) and not splits.dtype.is_integer:
        raise _errors.HvdliteInvalidArgumentError(
            f"hvdlite.tensorflow.alltoall: splits must be integers, got a {splits.dtype.name} tensor")
    if has_splits and not tf.is_tensor(splits):
        _check_arg(_ops.splits_arg, np.asarray(splits).reshape(-1).tolist())  # no cast of 1.5 to 1
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
        g = alltoall(dys[0], splits=received[0], process_set=process_set,
                     name=None if backward_names is None else backward_names[0])
        return [g[0]]

    out = _with_gradient(forward, grad, [tensor])[0]
    return (out, received[0]) if has_splits else out


# --------------------------------------------------------------------- reducescatter

def _reducescatter_group(tensors, compression, op, name, prescale_factor, postscale_factor,
                         process_set, what, grouped=True):
    op = resolve_tf_op(op, None, what)
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    for t in tensors:
        check_dtype(t, what, name)
        if t.shape.rank == 0:
            raise _errors.HvdliteInvalidArgumentError(
                f"hvdlite.tensorflow.{what}: {_describe(t, name)} is a scalar; reducescatter "
                f"splits dimension 0 and needs at least one dimension")
    python_side = compression is not None and not getattr(compression, "is_identity", False)
    ctxs = [None] * len(tensors)
    if python_side:
        pairs = [compression.compress(t) for t in tensors]
        tensors, ctxs = [p[0] for p in pairs], [p[1] for p in pairs]
    names = _names(name, len(tensors), "reducescatter", process_set, grouped)

    def forward(xs):
        return _reducescatter_cross(xs, op, prescale_factor, postscale_factor, names,
                                    process_set)

    def grad(xs, ys, dys):
        scale = policy.gradient_scale("reducescatter", op, prescale_factor, postscale_factor,
                                       process_set_or_global(process_set).size())
        gnames = grad_names(names)
        return [_allgather_group([g], None if gnames is None else gnames[i], what,
                                 process_set, grouped=False)[0]
                for i, g in enumerate(scaled(dys, scale))]

    outs = _with_gradient(forward, grad, tensors)
    return [compression.decompress(o, c) for o, c in zip(outs, ctxs)] if python_side else outs


def reducescatter(tensor, device_dense='', compression=Compression.none, op=Average,
                  name=None, process_set=global_process_set, ignore_name_scope=False,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduce ``tensor`` over ranks and give each rank its share of dimension 0.

    Rank r gets ``n // size`` rows plus one more if ``r < n % size``.
    """
    return _reducescatter_group([tensor], compression, op, name, prescale_factor,
                                postscale_factor, process_set, "reducescatter",
                                grouped=False)[0]


def grouped_reducescatter(tensors, device_dense='', compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0, name=None):
    """Reduce-scatter a list of tensors as one group; returns a list."""
    tensors = list(tensors)
    if not tensors:
        return []
    return _reducescatter_group(tensors, compression, op, name, prescale_factor,
                                postscale_factor, process_set, "grouped_reducescatter")


# ------------------------------------------------------------ barrier, join, queries

def _scalar_op(fn, label, dtype=tf.int32):
    """``fn()`` returning an int, or a function that waits and returns it (a collective),
    as an eager constant, or as a graph op that calls it when run."""
    def start():
        value = fn()
        if callable(value):
            return lambda: [np.asarray(value(), dtype=dtype.as_numpy_dtype)]
        return [np.asarray(value, dtype=dtype.as_numpy_dtype)]
    return cross(start, [], [dtype], [tf.TensorShape([])], label)[0]


def barrier(process_set=global_process_set, name=None):
    """Block until every rank reaches the barrier (in a graph: an op doing so)."""
    bname = op_name("barrier", name, process_set)

    def fn():
        work = _ops.barrier_async(bname, process_set)
        return lambda: (work.wait(), 0)[1]
    out = _scalar_op(fn, "HvdliteBarrier")
    return None if tf.executing_eagerly() else out.op


def join():
    """This rank has no more data: it contributes zeros to the other ranks' all-reduces
    until every rank has joined. Returns the last rank that joined (int32 scalar)."""
    return _scalar_op(lambda: _ops.join_async(finish=_ops.last_joined_rank).wait,
                      "HvdliteJoin")


def rank_op(name=None):
    """This process's rank, as an int32 tensor (evaluated when run, in a graph)."""
    from hvdlite import rank
    return _scalar_op(rank, name or "HvdliteRank")


def local_rank_op(name=None):
    from hvdlite import local_rank
    return _scalar_op(local_rank, name or "HvdliteLocalRank")


def size_op(process_set_id=0, name=None):
    """The number of ranks (of process set ``process_set_id``), as an int32 tensor."""
    return _scalar_op(lambda: _core.process_set_size(int(process_set_id)), name or "HvdliteSize")


def local_size_op(name=None):
    from hvdlite import local_size
    return _scalar_op(local_size, name or "HvdliteLocalSize")


def process_set_included_op(process_set_id=0, name=None):
    """1 if this rank belongs to process set ``process_set_id`` else 0 (int32 tensor)."""
    return _scalar_op(lambda: int(_core.process_set_included(int(process_set_id))),
                      name or "HvdliteProcessSetIncluded")
