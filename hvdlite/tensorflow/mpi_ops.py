"""TensorFlow collectives over the hvdlite C++ core, eagerly and inside ``tf.function``.

How a TensorFlow tensor reaches the core
----------------------------------------
* Eagerly, ``tensor.numpy()`` of a CPU tensor is a zero-copy view; the core writes its
  result into a fresh numpy array that ``tf.convert_to_tensor`` then adopts (also without
  a copy when the buffer is aligned).
* Inside a ``tf.function`` every collective is ONE stateful ``tf.numpy_function`` op:
  TensorFlow hands the Python function numpy views of the inputs, the function enqueues
  the request(s) on the core, waits for them (the core drops the GIL while waiting) and
  returns the results, whose shapes are then set on the graph tensors. ``tf.function``'s
  automatic control dependencies run stateful ops in program order, so every rank submits
  its collectives in the same order. A crossing costs about 50 us (see
  examples/keras_bench.py); that is why gradients are all-reduced in one grouped crossing.
* XLA cannot compile ``tf.numpy_function``: compile Keras models with
  ``jit_compile=False`` on machines with a GPU (on CPU-only machines Keras already does).

Names
-----
Requests are matched across ranks by name. A ``name=`` you pass is used as is (grouped
calls append ``.0``, ``.1``, ...). Otherwise: eagerly the core generates names in call
order; inside a ``tf.function`` a name is fixed when the function is traced,
``tf.<kind>.<k>`` with ``k`` counting the collectives of that traced function, so ranks
that trace the same code agree without depending on TensorFlow's op names (which embed
Keras' per-process model counters).

Gradients
---------
As in Horovod: allreduce -> allreduce of the gradient with the same op and scale factors;
allgather -> this rank's rows of the Average-allreduced gradient; broadcast -> the
Average-allreduced gradient on the root rank and zeros elsewhere; alltoall -> alltoall of
the gradient with the received splits; reducescatter -> allgather of the gradient
(multiplied by the number of ranks for op=Sum, as Horovod does).
"""

import warnings
import weakref

import numpy as np
import tensorflow as tf

import hvdlite as _hvd
from hvdlite import ops as _ops
from hvdlite.exceptions import HvdliteInvalidArgumentError
from hvdlite.ops import Adasum, Average, Max, Min, Product, Sum

from .compression import Compression, NoneCompressor

try:  # TensorFlow itself depends on ml_dtypes for bfloat16.
    import ml_dtypes as _ml_dtypes
    _BF16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    _BF16 = None

__all__ = ["allreduce", "grouped_allreduce", "allgather", "broadcast", "alltoall",
           "reducescatter", "barrier", "join", "Average", "Sum", "Adasum", "Min", "Max",
           "Product"]

#: dtypes the core can move; anything else is rejected before reaching it.
SUPPORTED_DTYPES = (tf.uint8, tf.int8, tf.int32, tf.int64, tf.float16, tf.bfloat16,
                    tf.float32, tf.float64, tf.bool)
_SUPPORTED_NAMES = ", ".join(d.name for d in SUPPORTED_DTYPES)
_WIRE_DTYPES = (tf.float32, tf.float64)
_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max",
             Product: "Product"}


# ----------------------------------------------------------------------------- helpers


def _executing_eagerly():
    return tf.executing_eagerly()


def _describe(tensor, name=None):
    """How error messages name a tensor: the name given, the graph name, or its signature."""
    if name is not None:
        return f"'{name}'"
    try:
        graph_name = tensor.name  # raises in eager mode
    except (AttributeError, ValueError):
        graph_name = None
    shape = getattr(tensor, "shape", None)
    shape = shape.as_list() if hasattr(shape, "as_list") and shape.rank is not None else shape
    if graph_name:
        return f"'{graph_name}' (shape {shape})"
    return f"tensor of shape {shape}"


def check_dtype(tensor, what, name=None):
    """Raise a clear error naming ``tensor`` unless the core supports its dtype."""
    dtype = tensor.dtype.base_dtype if hasattr(tensor.dtype, "base_dtype") else tensor.dtype
    if dtype not in SUPPORTED_DTYPES:
        raise HvdliteInvalidArgumentError(
            f"hvdlite.tensorflow.{what}: {_describe(tensor, name)} has dtype {dtype.name}, "
            f"which hvdlite does not support (supported: {_SUPPORTED_NAMES})")


def resolve_op(op, average=None, what="allreduce"):
    """Horovod's ``average=`` / ``op=`` handling; returns a validated reduce op."""
    if op is not None and average is not None:
        raise ValueError(f"hvdlite.tensorflow.{what}: pass either op= or the deprecated "
                         f"average=, not both")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning, stacklevel=3)
        op = Average if average else Sum
    if op is None:
        op = Average
    op = _ops.integer_arg(op, f"hvdlite.tensorflow.{what}: op")
    if op == Adasum:
        raise HvdliteInvalidArgumentError(
            f"hvdlite.tensorflow.{what}: op=Adasum is not supported by hvdlite; use Average or Sum")
    if op not in _OP_NAMES:
        raise HvdliteInvalidArgumentError(
            f"hvdlite.tensorflow.{what}: unknown reduce op {op!r}; use hvdlite.tensorflow."
            f"Average, Sum, Min, Max or Product")
    return int(op)


_graph_counters = weakref.WeakKeyDictionary()


def _outermost_function_graph(graph):
    try:
        from tensorflow.python.framework.func_graph import FuncGraph
    except ImportError:  # pragma: no cover
        return graph
    while isinstance(getattr(graph, "outer_graph", None), FuncGraph):
        graph = graph.outer_graph
    return graph


def op_name(kind, name=None):
    """The request name: ``name`` if given; None eagerly (the core numbers calls); else a
    name fixed at trace time, counted per outermost traced function."""
    if name is not None:
        return str(name)
    if _executing_eagerly():
        return None
    graph = _outermost_function_graph(tf.compat.v1.get_default_graph())
    k = _graph_counters.get(graph, 0)
    _graph_counters[graph] = k + 1
    return f"tf.{kind}.{k}"


def _as_array(a):
    return a if isinstance(a, np.ndarray) else np.asarray(a)


_ALIGN = 64   # TensorFlow adopts a numpy buffer without copying only if it is 64-byte aligned


def aligned_empty_like(a):
    """``np.empty_like(a)`` on a 64-byte boundary, so that TensorFlow takes the result over
    without a copy (for a 4 MiB tensor that is ~1.5 ms per crossing saved)."""
    nbytes = a.nbytes
    buf = np.empty(nbytes + _ALIGN, dtype=np.uint8)
    offset = (-buf.ctypes.data) % _ALIGN
    return buf[offset:offset + nbytes].view(a.dtype).reshape(a.shape)


def _to_tensor(array, dtype):
    """An eager tensor over ``array``: zero-copy through DLPack for aligned int/float
    arrays, else a copy (bool and bfloat16 have no numpy DLPack export)."""
    if (array.dtype.kind in "iuf" and array.dtype != _BF16 and array.flags.c_contiguous
            and array.ctypes.data % _ALIGN == 0 and array.size > 0):
        try:
            t = tf.experimental.dlpack.from_dlpack(array.__dlpack__())
            if t.dtype == dtype:
                return t
        except Exception:  # noqa: BLE001 - fall back to the copying path
            pass
    return tf.convert_to_tensor(array, dtype=dtype)


def _result_array(res):
    out = res.output
    if res.bfloat16:
        out = out.view(_BF16)
    return out


wait_all = _ops.wait_all


def cross(fn, inputs, touts, shapes, label):
    """Run ``fn(*numpy arrays) -> list of numpy arrays`` on ``inputs``.

    Eagerly it is a plain call; in a graph it becomes one stateful ``tf.numpy_function``
    whose outputs get ``shapes`` (None entries: leave unknown).
    """
    if _executing_eagerly():
        outs = fn(*[np.asarray(t) for t in inputs])   # zero-copy views of CPU tensors
        return [_to_tensor(_as_array(o), d) for o, d in zip(outs, touts)]
    outs = tf.numpy_function(fn, list(inputs), list(touts), stateful=True, name=label)
    if not isinstance(outs, (list, tuple)):
        outs = [outs]
    outs = list(outs)
    for o, s in zip(outs, shapes):
        if s is not None:
            o.set_shape(s)
    return outs


def _tape_may_record():
    """False when no gradient tape can see an eager op, so custom gradients can be skipped."""
    if not _executing_eagerly():
        return True
    try:
        from tensorflow.python.eager import record
        return record.could_possibly_record()
    except Exception:  # pragma: no cover - internal API moved: be safe
        return True


def _differentiable(tensors):
    return _tape_may_record() and any(t.dtype.is_floating or t.dtype.is_complex
                                      for t in tensors)


def _with_gradient(forward, grad_fn, tensors):
    """Apply ``forward(list) -> list`` with ``grad_fn(inputs, outputs, dys) -> dxs``."""
    if not _differentiable(tensors):
        return forward(list(tensors))

    @tf.custom_gradient
    def _fn(*xs):
        ys = forward(list(xs))

        def _grad(*dys):
            dys = [tf.zeros_like(y) if d is None else d for d, y in zip(dys, ys)]
            return grad_fn(list(xs), ys, dys)
        return ys, _grad

    return list(_fn(*tensors))


def _split_names(base, n):
    if base is None:
        return None
    return [f"{base}.{i}" for i in range(n)]


# ----------------------------------------------------------------------- the crossings

def _with_labels(error, names, labels):
    """Re-raise a core error adding what the request names in it stand for."""
    if not labels or names is None:
        return error
    text = str(error)
    hits = [f"'{n}' is the {labels[n]}" for n in names if n in labels and f"'{n}'" in text]
    if not hits:
        return error
    try:
        return type(error)(f"{text} ({'; '.join(hits)})")
    except Exception:  # noqa: BLE001 - an error type with another constructor
        return error


def _allreduce_cross(tensors, op, prescale, postscale, wire, names, labels=None):
    def fn(*arrays):
        arrays = [_as_array(a) for a in arrays]
        outs = [aligned_empty_like(a) for a in arrays]
        try:
            handles = _ops.grouped_allreduce_async(arrays, outs, names, op, prescale,
                                                   postscale, wire)
            wait_all(handles)
        except Exception as e:
            labelled = _with_labels(e, names, labels)
            if labelled is e:
                raise
            raise labelled from e
        return outs
    return cross(fn, tensors, [t.dtype for t in tensors], [t.shape for t in tensors],
                 "HvdliteAllreduce")


def _allgather_cross(tensors, names):
    def fn(*arrays):
        arrays = [_as_array(a) for a in arrays]
        handles = [_ops.allgather_async(a, name=None if names is None else names[i])
                   for i, a in enumerate(arrays)]
        return [_result_array(r) for r in wait_all(handles)]
    shapes = [tf.TensorShape([None]).concatenate(t.shape[1:]) for t in tensors]
    return cross(fn, tensors, [t.dtype for t in tensors], shapes, "HvdliteAllgather")


def _broadcast_cross(tensors, root_rank, names, label="HvdliteBroadcast"):
    def fn(*arrays):
        arrays = [_as_array(a) for a in arrays]
        outs = [aligned_empty_like(a) for a in arrays]
        handles = [_ops.broadcast_async(a, root_rank, output=o,
                                        name=None if names is None else names[i])
                   for i, (a, o) in enumerate(zip(arrays, outs))]
        wait_all(handles)
        return outs
    return cross(fn, tensors, [t.dtype for t in tensors], [t.shape for t in tensors], label)


# ------------------------------------------------------------------------- allreduce

def _allreduce_dense(tensors, op, prescale, postscale, compression, names, what, labels=None):
    """All-reduce dense tensors in one crossing, applying ``compression``; differentiable."""
    for i, t in enumerate(tensors):
        check_dtype(t, what, None if names is None else names[i])
    wire_name = getattr(compression, "wire_dtype", None)
    python_compression = compression is not None and compression is not NoneCompressor \
        and not isinstance(compression, str)
    if isinstance(compression, str):
        wire_name = compression
    ctxs = [None] * len(tensors)
    send = list(tensors)
    use_wire = False
    for i, t in enumerate(tensors):
        if wire_name and t.dtype in _WIRE_DTYPES:
            use_wire = True      # the core packs float32/float64 itself
        elif python_compression:
            send[i], ctxs[i] = compression.compress(t)
            check_dtype(send[i], what + " (compressed)", None if names is None else names[i])
    wire = wire_name if use_wire else None

    reduced = _allreduce_differentiable(send, op, prescale, postscale, wire, names, labels)
    if python_compression:
        reduced = [r if (wire_name and t.dtype in _WIRE_DTYPES)
                   else compression.decompress(r, ctx)
                   for r, t, ctx in zip(reduced, tensors, ctxs)]
    return reduced


def _allreduce_differentiable(tensors, op, prescale, postscale, wire, names, labels=None):
    if not tensors:
        return []
    if names is None and not _executing_eagerly():
        names = _split_names(op_name("allreduce"), len(tensors)) if len(tensors) > 1 \
            else [op_name("allreduce")]

    def forward(xs):
        return _allreduce_cross(xs, op, prescale, postscale, wire, names, labels)

    def grad(xs, ys, dys):
        grad_names = None if names is None or _executing_eagerly() else \
            [f"{n}.grad" for n in names]
        return _allreduce_differentiable(dys, op, prescale, postscale, wire, grad_names)

    return _with_gradient(forward, grad, tensors)


def _sparse_allreduce(slices, op, name, what):
    """Horovod's sparse allreduce: all-gather the rows (values and indices) of every rank."""
    if op not in (Average, Sum):
        raise HvdliteInvalidArgumentError(
            f"hvdlite.tensorflow.{what}: {_describe(slices.values, name)} is a tf.IndexedSlices "
            f"(sparse gradient); its rows can only be all-gathered for op=Average or Sum, not "
            f"{_OP_NAMES.get(op, op)}. Pass sparse_as_dense=True (or tf.convert_to_tensor it) "
            f"to reduce it densely")
    check_dtype(slices.values, what, name)
    indices = slices.indices
    base = op_name("sparse_allreduce", name)
    values, indices = _allgather_cross([slices.values, indices], _split_names(base, 2))
    if op == Average:
        values = values / tf.cast(_hvd.size(), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(tensor, average=None, device_dense='', device_sparse='',
              compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, name=None):
    """All-reduce ``tensor`` over all ranks (default op: Average), as ``hvd.allreduce``.

    ``tf.IndexedSlices`` are reduced as in Horovod by all-gathering their rows (Average
    divides the values by the number of ranks). ``device_dense``/``device_sparse`` are
    accepted for Horovod compatibility and ignored (the core works on host memory).
    """
    op = resolve_op(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        return _sparse_allreduce(tensor, op, name, "allreduce")
    tensor = tf.convert_to_tensor(tensor)
    return _allreduce_dense([tensor], op, prescale_factor, postscale_factor, compression,
                            None if name is None else [str(name)], "allreduce")[0]


def grouped_allreduce(tensors, average=None, device_dense='', device_sparse='',
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, name=None):
    """All-reduce a list of tensors in one request group (one crossing into the core)."""
    op = resolve_op(op, average, "grouped_allreduce")
    tensors = list(tensors)
    out = [None] * len(tensors)
    dense_idx = []
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            out[i] = _sparse_allreduce(t, op, None if name is None else f"{name}.{i}",
                                       "grouped_allreduce")
        else:
            dense_idx.append(i)
    dense = [tf.convert_to_tensor(tensors[i]) for i in dense_idx]
    names = None if name is None else [f"{name}.{i}" for i in dense_idx]
    reduced = _allreduce_dense(dense, op, prescale_factor, postscale_factor, compression,
                               names, "grouped_allreduce")
    for i, r in zip(dense_idx, reduced):
        out[i] = r
    return out


# ------------------------------------------------------------------------- allgather

def allgather(tensor, name=None):
    """Concatenate every rank's ``tensor`` along dimension 0 (first dims may differ).

    A scalar is gathered as a vector of one element per rank.
    """
    tensor = tf.convert_to_tensor(tensor)
    check_dtype(tensor, "allgather", name)
    scalar = tensor.shape.rank == 0
    x_in = tf.reshape(tensor, [1]) if scalar else tensor
    gname = op_name("allgather", name)

    def forward(xs):
        return _allgather_cross(xs, None if gname is None else [gname])

    def grad(xs, ys, dys):
        x = xs[0]
        g = _allreduce_differentiable([dys[0]], Average, 1.0, 1.0, None, None)[0]
        d0 = tf.shape(x, out_type=tf.int64)[:1]
        sizes = _allgather_cross([d0], None if _executing_eagerly() else
                                 [op_name("allgather_grad_sizes")])[0]
        start = tf.reduce_sum(sizes[:_hvd.rank()])
        return [g[start:start + d0[0]]]

    out = _with_gradient(forward, grad, [x_in])[0]
    return out


# ------------------------------------------------------------------------- broadcast

def broadcast(tensor, root_rank, name=None):
    """Every rank gets ``root_rank``'s ``tensor``."""
    tensor = tf.convert_to_tensor(tensor)
    check_dtype(tensor, "broadcast", name)
    root_rank = _ops.root_rank_arg(root_rank)
    bname = op_name("broadcast", name)

    def forward(xs):
        return _broadcast_cross(xs, root_rank, None if bname is None else [bname])

    def grad(xs, ys, dys):
        g = _allreduce_differentiable([dys[0]], Average, 1.0, 1.0, None, None)[0]
        return [g if _hvd.rank() == root_rank else g * 0]

    return _with_gradient(forward, grad, [tensor])[0]


# -------------------------------------------------------------------------- alltoall

def alltoall(tensor, splits=None, name=None):
    """Send ``splits[i]`` rows of ``tensor`` to rank i (default: equal parts).

    Returns the received rows concatenated in rank order, and, when ``splits`` is given,
    also the number of rows received from each rank (int32), as Horovod does.
    """
    tensor = tf.convert_to_tensor(tensor)
    check_dtype(tensor, "alltoall", name)
    has_splits = splits is not None
    if has_splits and tf.is_tensor(splits) and not splits.dtype.is_integer:
        raise HvdliteInvalidArgumentError(
            f"hvdlite.tensorflow.alltoall: splits must be integers, got a {splits.dtype.name} tensor")
    if has_splits and not tf.is_tensor(splits):
        _ops.splits_arg(np.asarray(splits).reshape(-1).tolist())  # no silent cast of 1.5 to 1
    splits_t = tf.cast(tf.convert_to_tensor(splits), tf.int32) if has_splits \
        else tf.constant([], dtype=tf.int32)
    aname = op_name("alltoall", name)
    received = []

    def fn(arr, spl):
        arr = _as_array(arr)
        spl = [int(s) for s in np.asarray(spl).reshape(-1)]
        h = _ops.alltoall_async(arr, splits=spl or None, name=aname)
        res = _ops.wait(h)
        rs = np.asarray(res.received_splits if res.received_splits is not None else [],
                        dtype=np.int32)
        return [_result_array(res), rs]

    def forward(xs):
        out, rsplits = cross(fn, [xs[0], splits_t], [tensor.dtype, tf.int32],
                             [tf.TensorShape([None]).concatenate(tensor.shape[1:]),
                              tf.TensorShape([None])], "HvdliteAlltoall")
        received.append(rsplits)
        return [out]

    def grad(xs, ys, dys):
        g = alltoall(dys[0], splits=received[0],
                     name=None if aname is None or _executing_eagerly() else aname + ".grad")
        return [g[0]]

    out = _with_gradient(forward, grad, [tensor])[0]
    return (out, received[0]) if has_splits else out


# --------------------------------------------------------------------- reducescatter

def reducescatter(tensor, device_dense='', compression=Compression.none, op=Average,
                  name=None, prescale_factor=1.0, postscale_factor=1.0):
    """Reduce ``tensor`` over ranks and give each rank its share of dimension 0.

    Rank r gets ``n // size`` rows plus one more if ``r < n % size``.
    """
    op = resolve_op(op, None, "reducescatter")
    tensor = tf.convert_to_tensor(tensor)
    check_dtype(tensor, "reducescatter", name)
    ctx = None
    send = tensor
    python_compression = compression is not None and compression is not NoneCompressor
    if python_compression:
        send, ctx = compression.compress(tensor)
        check_dtype(send, "reducescatter (compressed)", name)
    rname = op_name("reducescatter", name)
    n0 = tensor.shape[0] if tensor.shape.rank else None
    rows = None
    if n0 is not None:
        size, rank = _hvd.size(), _hvd.rank()
        rows = n0 // size + (1 if rank < n0 % size else 0)

    def fn(arr):
        h = _ops.reducescatter_async(_as_array(arr), name=rname, op=op,
                                     prescale_factor=prescale_factor,
                                     postscale_factor=postscale_factor)
        return [_result_array(_ops.wait(h))]

    def forward(xs):
        return cross(fn, xs, [xs[0].dtype],
                     [tf.TensorShape([rows]).concatenate(xs[0].shape[1:])],
                     "HvdliteReducescatter")

    def grad(xs, ys, dys):
        g = dys[0]
        if op == Sum:
            g = g * tf.cast(_hvd.size(), g.dtype)
        return [allgather(g, name=None if rname is None or _executing_eagerly()
                          else rname + ".grad")]

    out = _with_gradient(forward, grad, [send])[0]
    if python_compression:
        out = compression.decompress(out, ctx)
    return out


# ------------------------------------------------------------------- barrier and join

def barrier(name=None):
    """Block until every rank reaches the barrier (inside tf.function: an op doing so)."""
    bname = op_name("barrier", name)

    def fn():
        _ops.wait(_ops.barrier_async(bname))
        return [np.int32(0)]
    if _executing_eagerly():
        fn()
        return None
    return tf.numpy_function(fn, [], [tf.int32], stateful=True, name="HvdliteBarrier")[0].op


def join():
    """This rank has no more data: it contributes zeros to the other ranks' all-reduces
    until every rank has joined. Returns the last rank that joined (int32 scalar)."""
    def fn():
        res = _ops.wait(_ops.join_async())
        last = -1 if res.last_joined_rank is None else res.last_joined_rank
        return [np.int32(last)]
    if _executing_eagerly():
        return tf.constant(fn()[0], dtype=tf.int32)
    out = tf.numpy_function(fn, [], [tf.int32], stateful=True, name="HvdliteJoin")[0]
    out.set_shape([])
    return out
