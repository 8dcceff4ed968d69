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

Names, errors and gradients: :mod:`hvdlite.convert.tf_requests`, which holds the requests
these functions give Horovod's signatures to (the Keras TensorFlow bridge shares them).
"""

import numpy as np
import tensorflow as tf

from hvdlite import _core, basics, policy, ops as _ops
from hvdlite.policy import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from hvdlite.process_sets import (ProcessSet, add_process_set,  # noqa: F401
                                  global_process_set, remove_process_set)

from hvdlite.convert import tf_requests as _req
from hvdlite.convert.tf_requests import cross, op_name, resolve_tf_op

from .compression import Compression

__all__ = ["allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast",
           "broadcast_", "alltoall", "reducescatter", "grouped_reducescatter", "barrier",
           "join", "rank_op", "size_op", "local_rank_op", "local_size_op",
           "process_set_included_op", "Average", "Sum", "Adasum", "Min", "Max", "Product"]

broadcast_ = _req.broadcast_


# ------------------------------------------------------------------------- allreduce

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
    return _req.allreduce(tensor, resolve_tf_op(op, average, "allreduce"), prescale_factor,
                          postscale_factor, compression, name, process_set)


def grouped_allreduce(tensors, average=None, device_dense='', device_sparse='',
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """All-reduce a list of tensors in one request group (one crossing into the core)."""
    op = resolve_tf_op(op, average, "grouped_allreduce")
    tensors = list(tensors)
    names = policy.member_names(name, len(tensors))

    def sparse(i):
        _req.check_sparse_scales(prescale_factor, postscale_factor, "grouped_allreduce")
        return _req.allreduce_sparse(tensors[i], op, names[i], "grouped_allreduce", process_set)

    def dense(indices):
        return _req.allreduce_dense([tf.convert_to_tensor(tensors[i]) for i in indices], op,
                                    prescale_factor, postscale_factor, compression,
                                    None if name is None else [names[i] for i in indices],
                                    "grouped_allreduce", process_set)
    return policy.apart_and_together([isinstance(t, tf.IndexedSlices) for t in tensors],
                                     sparse, dense)


# ------------------------------------------------------------------ allgather, broadcast

def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenate every rank's ``tensor`` along dimension 0 (first dims may differ).
    A scalar is gathered as a vector of one element per rank."""
    return _req.allgather_group([tensor], name, "allgather", process_set, grouped=False)[0]


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """All-gather a list of tensors as one group; returns a list."""
    tensors = list(tensors)
    return (_req.allgather_group(tensors, name, "grouped_allgather", process_set)
            if tensors else [])


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """Every rank gets ``root_rank``'s ``tensor``."""
    return _req.broadcast(tensor, root_rank, name, process_set)


# -------------------------------------------------------------------------- alltoall

def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Send ``splits[i]`` rows of ``tensor`` to rank i (default: equal parts).

    Returns the received rows concatenated in rank order, and, when ``splits`` is given,
    also the number of rows received from each rank (int32), as Horovod does.
    """
    out, received = _req.alltoall(tensor, splits, name, process_set)
    return (out, received) if splits is not None else out


# --------------------------------------------------------------------- reducescatter

def reducescatter(tensor, device_dense='', compression=Compression.none, op=Average,
                  name=None, process_set=global_process_set, ignore_name_scope=False,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduce ``tensor`` over ranks and give each rank its share of dimension 0.

    Rank r gets ``n // size`` rows plus one more if ``r < n % size``.
    """
    return _req.reducescatter_group([tensor], compression, op, name, prescale_factor,
                                    postscale_factor, process_set, "reducescatter",
                                    grouped=False)[0]


def grouped_reducescatter(tensors, device_dense='', compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0, name=None):
    """Reduce-scatter a list of tensors as one group; returns a list."""
    tensors = list(tensors)
    if not tensors:
        return []
    return _req.reducescatter_group(tensors, compression, op, name, prescale_factor,
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
    return _scalar_op(basics.rank, name or "HvdliteRank")


def local_rank_op(name=None):
    return _scalar_op(basics.local_rank, name or "HvdliteLocalRank")


def size_op(process_set_id=0, name=None):
    """The number of ranks (of process set ``process_set_id``), as an int32 tensor."""
    return _scalar_op(lambda: _core.process_set_size(int(process_set_id)), name or "HvdliteSize")


def local_size_op(name=None):
    return _scalar_op(basics.local_size, name or "HvdliteLocalSize")


def process_set_included_op(process_set_id=0, name=None):
    """1 if this rank belongs to process set ``process_set_id`` else 0 (int32 tensor)."""
    return _scalar_op(lambda: int(_core.process_set_included(int(process_set_id))),
                      name or "HvdliteProcessSetIncluded")
