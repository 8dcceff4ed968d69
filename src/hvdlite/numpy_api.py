"""Horovod's collective API on numpy arrays (any array with ``__dlpack__`` is accepted too).

Out-of-place ops return new numpy arrays; the trailing-underscore forms work in place. The
``*_async`` forms return a :class:`~hvdlite.work.Work` (``int(work)`` is Horovod's int
handle) for ``poll`` / ``synchronize``. Every op takes ``process_set=``.

``broadcast_object`` / ``allgather_object`` pickle Python objects over uint8 arrays; the
torch and TensorFlow adapters use them as they are.
"""

import pickle

import numpy as np

from . import ops
from .basics import rank
from .object_payload import header, pickled, raise_if_any_failed
from .policy import Average, auto_name, group_names, resolve_op
from .ops import poll, synchronize  # noqa: F401

try:  # cloudpickle also handles lambdas and locally defined classes, as Horovod
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover - cloudpickle is optional
    _pickler = pickle


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


def _outputs(outputs):
    return lambda _results: outputs


def _arrays(results):
    return [r.array() for r in results]


def _first_array(results):
    return results[0].array()


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, compression=None, process_set=None):
    tensors = [_as_array(t) for t in tensors]
    outputs = [_empty_like(t) for t in tensors]
    return ops.grouped_allreduce_async(
        tensors, outputs, group_names(name, len(tensors)), resolve_op(op, average),
        prescale_factor, postscale_factor, compression, process_set, _outputs(outputs))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, compression=None, process_set=None):
    tensors = list(tensors)
    return ops.grouped_allreduce_async(
        tensors, tensors, group_names(name, len(tensors)), resolve_op(op, average),
        prescale_factor, postscale_factor, compression, process_set, _outputs(tensors))


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, compression=None, process_set=None):
    tensors = [_as_array(t) for t in tensors]
    return _grouped_allreduce_into(tensors, [_empty_like(t) for t in tensors], average, name,
                                   op, prescale_factor, postscale_factor, compression,
                                   process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, compression=None, process_set=None):
    tensors = list(tensors)
    return _grouped_allreduce_into(tensors, tensors, average, name, op, prescale_factor,
                                   postscale_factor, compression, process_set)


def _grouped_allreduce_into(tensors, outputs, average, name, op, prescale_factor,
                            postscale_factor, compression, process_set):
    ops.grouped_allreduce(tensors, outputs, group_names(name, len(tensors)),
                          resolve_op(op, average), prescale_factor, postscale_factor,
                          compression, process_set)
    return outputs


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, compression=None, process_set=None):
    tensor = _as_array(tensor)
    output = _empty_like(tensor)
    return ops.allreduce_async(tensor, output, name, resolve_op(op, average), prescale_factor,
                               postscale_factor, compression, process_set,
                               lambda _: output)


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, compression=None, process_set=None):
    tensor = _as_array(tensor)
    output = _empty_like(tensor)
    if average is not None:  # the deprecated spelling; ops.allreduce resolves op itself
        op = resolve_op(op, average)
    ops.allreduce(tensor, output, name, op, prescale_factor, postscale_factor, compression,
                  process_set)
    return output


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, compression=None, process_set=None):
    return ops.allreduce_async(tensor, tensor, name, resolve_op(op, average), prescale_factor,
                               postscale_factor, compression, process_set, lambda _: tensor)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, compression=None, process_set=None):
    if average is not None:  # the deprecated spelling; ops.allreduce resolves op itself
        op = resolve_op(op, average)
    ops.allreduce(tensor, tensor, name, op, prescale_factor, postscale_factor, compression,
                  process_set)
    return tensor


def allgather_async(tensor, name=None, process_set=None):
    return ops.allgather_async(_as_array(tensor), name, process_set, _first_array)


def allgather(tensor, name=None, process_set=None):
    """Concatenate every rank's array along dimension 0 (sizes of dimension 0 may differ)."""
    return allgather_async(tensor, name, process_set).wait()


def grouped_allgather_async(tensors, name=None, process_set=None):
    tensors = [_as_array(t) for t in tensors]
    return ops.grouped_allgather_async(tensors, group_names(name, len(tensors)),
                                       process_set, _arrays)


def grouped_allgather(tensors, name=None, process_set=None):
    return grouped_allgather_async(tensors, name, process_set).wait()


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    tensor = _as_array(tensor)
    output = _empty_like(tensor)
    return ops.broadcast_async(tensor, root_rank, output, name, process_set, lambda _: output)


def broadcast(tensor, root_rank, name=None, process_set=None):
    return broadcast_async(tensor, root_rank, name, process_set).wait()


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    return ops.broadcast_async(tensor, root_rank, tensor, name, process_set, lambda _: tensor)


def broadcast_(tensor, root_rank, name=None, process_set=None):
    return broadcast_async_(tensor, root_rank, name, process_set).wait()


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    def finish(results):
        out = results[0].array()
        if splits is None:
            return out
        return out, np.asarray(results[0].received_splits, dtype=np.int64)
    return ops.alltoall_async(_as_array(tensor), splits, name, process_set, finish)


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Send ``splits[i]`` rows to rank i (equal parts by default).

    Returns the received rows, and with ``splits`` also the rows received from each rank.
    """
    return alltoall_async(tensor, splits, name, process_set).wait()


def reducescatter_async(tensor, name=None, op=Average, prescale_factor=1.0,
                        postscale_factor=1.0, process_set=None):
    return ops.reducescatter_async(_as_array(tensor), name, op, prescale_factor,
                                   postscale_factor, process_set, _first_array)


def reducescatter(tensor, name=None, op=Average, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=None):
    return reducescatter_async(tensor, name, op, prescale_factor, postscale_factor,
                               process_set).wait()


def grouped_reducescatter_async(tensors, name=None, op=Average, prescale_factor=1.0,
                                postscale_factor=1.0, process_set=None):
    tensors = [_as_array(t) for t in tensors]
    return ops.grouped_reducescatter_async(
        tensors, group_names(name, len(tensors)), op, prescale_factor,
        postscale_factor, process_set, _arrays)


def grouped_reducescatter(tensors, name=None, op=Average, prescale_factor=1.0,
                          postscale_factor=1.0, process_set=None):
    return grouped_reducescatter_async(tensors, name, op, prescale_factor, postscale_factor,
                                       process_set).wait()


def barrier(process_set=None):
    """Return once every rank (of ``process_set``) has called barrier()."""
    ops.barrier_async(process_set=process_set).wait()


def join():
    """Signal this rank has no more data; returns the rank that joined last once all have.

    Until then this rank contributes zeros to the all-reduces the other ranks still run.
    """
    return ops.join_async(finish=ops.last_joined_rank).wait()


# --------------------------------------------------------------------- Python objects

def broadcast_object(obj, root_rank=0, name=None, process_set=None):
    """Pickle ``obj`` on ``root_rank`` and return it (unpickled) on every rank.

    Unnamed calls are numbered in call order, so every rank must make them in the same order.
    If the root cannot pickle ``obj``, every rank raises HvdliteInvalidArgumentError
    (Note [object collectives agree on failure]).
    """
    name = auto_name("broadcast_object", name, ops.process_set_id(process_set))
    is_root = rank() == int(root_rank)     # roots are global ranks, as in Horovod
    payload, error = pickled(obj, _pickler) if is_root else (None, None)
    head = header(rank(), payload, error) if is_root else np.zeros(3, dtype=np.int64)
    ops.broadcast_async(head, root_rank, None, f"{name}.sz", process_set).wait()
    data = payload.copy() if is_root else np.empty(int(head[0]), dtype=np.uint8)
    ops.broadcast_async(data, root_rank, None, f"{name}.t", process_set).wait()
    raise_if_any_failed(f"broadcast_object '{name}'", [head], [data], error)
    return obj if is_root else _pickler.loads(data.tobytes())


def allgather_object(obj, name=None, process_set=None):
    """Pickle ``obj`` on every rank; return the list of every rank's object, in rank order.

    If some rank cannot pickle its object, every rank raises HvdliteInvalidArgumentError
    naming it (Note [object collectives agree on failure])."""
    name = auto_name("allgather_object", name, ops.process_set_id(process_set))
    payload, error = pickled(obj, _pickler)
    heads = allgather(header(rank(), payload, error).reshape(1, 3), f"{name}.sz", process_set)
    data = allgather(payload, f"{name}.t", process_set)
    ends = np.cumsum(heads[:, 0]).tolist()
    parts = [data[end - int(n):end] for end, n in zip(ends, heads[:, 0])]
    raise_if_any_failed(f"allgather_object '{name}'", heads, parts, error)
    return [_pickler.loads(p.tobytes()) for p in parts]

