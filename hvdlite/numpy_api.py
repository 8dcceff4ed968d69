"""Horovod's collective API on numpy arrays (any array with ``__dlpack__`` is accepted too).

Out-of-place ops return new numpy arrays; the trailing-underscore forms work in place. The
``*_async`` forms return an int handle for ``poll`` / ``synchronize``. Every collective takes
``process_set=`` (a :class:`hvdlite.ProcessSet`; default all ranks).
"""

import threading

import numpy as np

from . import ops
from .ops import Average, Sum

_finishers = {}  # handle -> function turning ops.Result into what synchronize returns
_finishers_lock = threading.Lock()


def _as_array(tensor):
    """Arrays and DLPack tensors pass through untouched (the core reads them in place)."""
    if isinstance(tensor, np.ndarray) or hasattr(tensor, "__dlpack__"):
        return tensor
    return np.asarray(tensor)


def _empty_like(tensor):
    """A numpy output matching ``tensor``, which may be any DLPack tensor."""
    if isinstance(tensor, np.ndarray):
        return np.empty_like(tensor)
    try:
        return np.empty_like(np.from_dlpack(tensor))
    except (RuntimeError, TypeError, BufferError):
        # numpy cannot name the dtype (bfloat16): ml_dtypes can, when installed.
        if "bfloat16" in str(getattr(tensor, "dtype", "")):
            import ml_dtypes
            return np.empty(tuple(tensor.shape), dtype=ml_dtypes.bfloat16)
        raise


def _resolve_op(average, op):
    """Horovod's deprecated ``average=`` flag maps onto ``op``."""
    if average is not None:
        if op is not None:
            raise ValueError("pass either op= or the deprecated average=, not both")
        return Average if average else Sum
    return Average if op is None else op


def _track(handle, finisher):
    with _finishers_lock:
        _finishers[handle] = finisher
    return handle


def _result_array(result: ops.Result):
    out = result.output
    if result.bfloat16:
        try:
            import ml_dtypes
            out = out.view(ml_dtypes.bfloat16)
        except ImportError:
            pass  # stays as uint16 bits
    return out


def synchronize(handle):
    """Wait for an async op and return its result (the output array, or a tuple for alltoall)."""
    if handle == _EMPTY_GROUP:
        return []
    with _finishers_lock:
        finisher = _finishers.pop(handle, None)
    result = ops.wait(handle)
    return finisher(result) if finisher else None


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, compression=None, process_set=None):
    tensor = _as_array(tensor)
    output = _empty_like(tensor)
    h = ops.allreduce_async(tensor, output, name, _resolve_op(average, op), prescale_factor,
                            postscale_factor, compression, process_set=process_set)
    return _track(h, lambda _: output)


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, compression=None, process_set=None):
    return synchronize(allreduce_async(tensor, average, name, op, prescale_factor,
                                       postscale_factor, compression, process_set))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, compression=None, process_set=None):
    h = ops.allreduce_async(tensor, tensor, name, _resolve_op(average, op), prescale_factor,
                            postscale_factor, compression, process_set=process_set)
    return _track(h, lambda _: tensor)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, compression=None, process_set=None):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, compression, process_set))


def _grouped(tensors, outputs, name, op, prescale_factor, postscale_factor, compression, process_set=None):
    names = None if name is None else [f"{name}.{i}" for i in range(len(tensors))]
    handles = ops.grouped_allreduce_async(tensors, outputs, names, op, prescale_factor,
                                          postscale_factor, compression, process_set=process_set)
    return handles


# The handle of an empty group: nothing was enqueued, synchronize returns [].
_EMPTY_GROUP = -1


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, compression=None, process_set=None):
    tensors = [_as_array(t) for t in tensors]
    outputs = [_empty_like(t) for t in tensors]
    handles = _grouped(tensors, outputs, name, _resolve_op(average, op), prescale_factor,
                       postscale_factor, compression, process_set)
    return _track_group(handles, outputs)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, compression=None, process_set=None):
    tensors = list(tensors)
    handles = _grouped(tensors, tensors, name, _resolve_op(average, op), prescale_factor,
                       postscale_factor, compression, process_set)
    return _track_group(handles, tensors)


def _track_group(handles, outputs):
    if not handles:
        return _EMPTY_GROUP
    # One handle stands for the group (as in Horovod): its last; synchronizing it waits for
    # every member.
    rest = handles[:-1]

    def finish(_):
        for h in rest:
            ops.wait(h)
        return outputs
    return _track(handles[-1], finish)


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, compression=None, process_set=None):
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                               postscale_factor, compression, process_set))


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, compression=None, process_set=None):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, compression, process_set))


def allgather_async(tensor, name=None, process_set=None):
    return _track(ops.allgather_async(_as_array(tensor), name, process_set=process_set),
                  _result_array)


def allgather(tensor, name=None, process_set=None):
    """Concatenate every rank's array along dimension 0 (sizes of dimension 0 may differ)."""
    return synchronize(allgather_async(tensor, name, process_set))


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    tensor = _as_array(tensor)
    output = _empty_like(tensor)
    return _track(ops.broadcast_async(tensor, root_rank, output, name, process_set=process_set),
                  lambda _: output)


def broadcast(tensor, root_rank, name=None, process_set=None):
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    return _track(ops.broadcast_async(tensor, root_rank, tensor, name, process_set=process_set),
                  lambda _: tensor)


def broadcast_(tensor, root_rank, name=None, process_set=None):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    def finish(result):
        out = _result_array(result)
        return out if splits is None else (out, np.asarray(result.received_splits, dtype=np.int64))
    return _track(ops.alltoall_async(_as_array(tensor), splits, name, process_set=process_set),
                  finish)


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Send ``splits[i]`` rows to rank i (equal parts by default).

    Returns the received rows, and with ``splits`` also the rows received from each rank.
    """
    return synchronize(alltoall_async(tensor, splits, name, process_set))


def reducescatter_async(tensor, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return _track(ops.reducescatter_async(_as_array(tensor), name, op, prescale_factor,
                                          postscale_factor, process_set=process_set),
                  _result_array)


def reducescatter(tensor, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0, process_set=None):
    return synchronize(reducescatter_async(tensor, name, op, prescale_factor, postscale_factor,
                                           process_set))


def barrier(process_set=None):
    """Return once every rank (of ``process_set``, default all) has called barrier()."""
    synchronize(ops.barrier_async(process_set=process_set))


def join():
    """Signal this rank has no more data; returns the rank that joined last once all have.

    Until then this rank contributes zeros to the all-reduces the other ranks still run.
    """
    return ops.wait(ops.join_async()).last_joined_rank
