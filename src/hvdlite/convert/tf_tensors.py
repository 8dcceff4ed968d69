"""TensorFlow tensors in and out of the core: zero-copy conversions, the crossing of a
collective into a graph (one ``tf.numpy_function``, or two ops and a critical section in a
TF1 graph), and the names graphs fix at build time. Used by ``hvdlite.tensorflow``; the
error classes a crossing raises are the caller's (``native``)."""

import functools
import itertools
import weakref

import numpy as np
import tensorflow as tf

from hvdlite.exceptions import HvdliteError, raise_replaced
from hvdlite.policy.names import kept_counters

from . import dlpack_arrays, tf_check_status

try:  # TensorFlow itself depends on ml_dtypes for bfloat16.
    import ml_dtypes as _ml_dtypes
    BF16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    BF16 = None


graph_counters = weakref.WeakKeyDictionary()  # outermost graph -> its name counters


def counters_of(graph):
    """The name counters of ``graph`` (an outermost graph), made on first use; they start
    over with the job-wide ones (Note [unnamed names after a failure] in
    src/hvdlite/policy/names.py)."""
    counters = graph_counters.get(graph)
    if counters is None:
        counters = graph_counters.setdefault(graph, kept_counters())
    return counters


def outermost_function_graph(graph):
    from tensorflow.python.framework.func_graph import FuncGraph
    while isinstance(getattr(graph, "outer_graph", None), FuncGraph):
        graph = graph.outer_graph
    return graph


def is_tf1_graph(graph):
    from tensorflow.python.framework.func_graph import FuncGraph
    return not isinstance(graph, FuncGraph)


def as_array(a):
    return a if isinstance(a, np.ndarray) else np.asarray(a)


_ALIGN = 64   # TensorFlow adopts a numpy buffer without copying only if it is 64-byte aligned


def aligned_empty_like(a):
    """``np.empty_like(a)`` on a 64-byte boundary, so that TensorFlow takes the result over
    without a copy (for a 4 MiB tensor that is ~1.5 ms per crossing saved)."""
    buf = np.empty(a.nbytes + _ALIGN, dtype=np.uint8)
    offset = (-buf.ctypes.data) % _ALIGN
    return buf[offset:offset + a.nbytes].view(a.dtype).reshape(a.shape)


def to_tensor(array, dtype):
    """An eager tensor over ``array``: zero-copy through DLPack for aligned int/float
    arrays, else a copy (bool and bfloat16 have no numpy DLPack export)."""
    if (array.dtype.kind in "iuf" and array.dtype != BF16 and array.flags.c_contiguous
            and array.ctypes.data % _ALIGN == 0 and array.size > 0):
        try:
            t = tf.experimental.dlpack.from_dlpack(array.__dlpack__())
            if t.dtype == dtype:
                return t
        except Exception:  # noqa: BLE001 - fall back to the copying path
            pass
    return tf.convert_to_tensor(array, dtype=dtype)


def result_arrays(results):
    return [as_array(r.array()) for r in results]


def translated(fn, native):
    """``fn`` whose core errors leave as ``native(error)``."""
    @functools.wraps(fn)
    def wrapped(*args):
        try:
            return fn(*args)
        except HvdliteError as e:
            raise_replaced(e, native(e), chain=False)
    return wrapped


def cross(start, inputs, touts, shapes, label, native):
    """Run a collective on ``inputs`` (numpy arrays in, numpy arrays out).

    ``start(*arrays)`` submits it and returns a function that waits and returns the list
    of result arrays (or returns that list itself, for what does not wait). Eagerly and in
    a ``tf.function`` the two steps are one stateful ``tf.numpy_function``; in a TF1 graph
    they are two ops (see ``_tf1_collective``). Outputs get ``shapes`` (None: unknown).
    ``native(error)``: the error a core error becomes (the adapter's TensorFlow classes).
    """
    def run(*arrays):
        out = start(*arrays)
        return out() if callable(out) else out
    if tf.executing_eagerly():
        outs = translated(run, native)(*[np.asarray(t) for t in inputs])   # zero-copy views
        return [to_tensor(as_array(o), d) for o, d in zip(outs, touts)]
    graph = tf.compat.v1.get_default_graph()
    if is_tf1_graph(graph):
        outs = _tf1_collective(graph, start, inputs, touts, label, native)
    else:
        outs = _graph_numpy_function(run, list(inputs), list(touts), label, native)
    for o, s in zip(outs, shapes):
        if s is not None:
            o.set_shape(s)
    return outs


# Note [TF1 collectives: submit, then wait in a critical section]
# A graph op that waits blocks one of TensorFlow's inter-op threads. In a TF1 graph (no
# automatic control dependencies) the executor may start independent collectives in a
# different order on each rank; with every thread blocked in a collective that another
# rank has not submitted, neither rank ever submits what the other waits for. So a TF1
# collective is two ops: the first submits (it never waits) and hands a ticket to the
# second, which waits inside the graph's CriticalSection. Waiting for its mutex does not
# hold a thread (MutexLock is asynchronous), so at most one thread per graph waits for a
# collective and the others go on submitting: every rank submits every collective of the
# step, whatever the order. With a single inter-op thread that thread may still wait
# before the other collectives are submitted: give TF1 sessions two or more.
# No control dependency links different collectives, so fetching one runs only it (and
# what it reads), never the collectives created before it.

_critical_sections = weakref.WeakKeyDictionary()   # TF1 graph -> its CriticalSection
_started = {}                                      # ticket -> the wait of a submitted op
_tickets = itertools.count(1)


def _graph_numpy_function(fn, inputs, touts, label, native):
    """``fn`` (returning a list of arrays) as a stateful ``tf.numpy_function`` whose hvdlite
    errors reach the caller as ``native(error)``'s ``tf.errors`` class, through the
    HvdliteCheckStatus op (:mod:`hvdlite.convert.tf_check_status`); where that op cannot be
    loaded, TensorFlow reports them as UnknownError. Returns the list of output tensors."""
    module = tf_check_status.op_module()
    if module is None:
        outs = tf.numpy_function(translated(fn, native), inputs, touts, stateful=True,
                                 name=label)
        return list(outs) if isinstance(outs, (list, tuple)) else [outs]
    results = tf.numpy_function(tf_check_status.reporting(fn, touts, native), inputs,
                                touts + [tf.int32, tf.uint8], stateful=True, name=label)
    return tf_check_status.checked(module, results, label + "Check")


def _tf1_collective(graph, start, inputs, touts, label, native):
    def submit(*arrays):
        ticket = next(_tickets)
        _started[ticket] = start(*arrays)
        return [np.int64(ticket)]

    def finish(ticket):
        out = _started.pop(int(ticket))
        return out() if callable(out) else out

    ticket, = _graph_numpy_function(submit, list(inputs), [tf.int64], label + "Submit", native)
    if graph not in _critical_sections:
        with tf.init_scope():   # outside any control-flow context the op is built in
            _critical_sections[graph] = tf.CriticalSection(name="HvdliteCollectives")
    return list(_critical_sections[graph].execute(
        lambda: _graph_numpy_function(finish, [ticket], list(touts), label, native)))


def tape_may_record():
    """False when no gradient tape can see an eager op, so custom gradients can be skipped."""
    if not tf.executing_eagerly():
        return True
    try:
        from tensorflow.python.eager import record
        return record.could_possibly_record()
    except Exception:  # pragma: no cover - internal API moved: be safe
        return True


def grad_names(names):
    """The names of a gradient's collectives: ``<name>.grad``, then ``.grad1``, ``.grad2``
    for later gradients of the same op in the graph (each ``tf.gradients`` call builds its
    own; fetched together they are in flight at once, so they need names of their own)."""
    if names is None or tf.executing_eagerly():
        return None
    graph = outermost_function_graph(tf.compat.v1.get_default_graph())
    counter = counters_of(graph).setdefault(("grad", names[0]), itertools.count())
    k = next(counter)
    return [f"{n}.grad{k or ''}" for n in names]


def scaled(tensors, factor):
    return tensors if factor == 1.0 else [t * tf.cast(factor, t.dtype) for t in tensors]


class GpuTensors(dlpack_arrays.Framework):
    """Eager GPU tensors through DLPack (Note [DLPack hand-off without a framework stream]):
    TensorFlow's ``__dlpack__`` takes no stream, so its GPU work is waited for with
    ``tf.test.experimental.sync_devices()``. An output is an uninitialised tensor of its own
    (``Empty``: never a buffer shared with another tensor), which only the core writes."""

    name = "TensorFlow"
    handoff = "sync"

    def sync(self):
        tf.test.experimental.sync_devices()

    def empty_like(self, x):
        with tf.device(x.device):
            return tf.raw_ops.Empty(shape=tf.shape(x), dtype=x.dtype, init=False)


GPU_TENSORS = GpuTensors()
