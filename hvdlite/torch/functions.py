"""Model/optimizer/object broadcast helpers, as ``horovod.torch.functions``."""

import pickle
from collections import namedtuple

import torch

import hvdlite as _hvd
from hvdlite import ops as _ops

from .mpi_ops import (_check_process_set, _copy_back, _register, allgather, broadcast_,
                      broadcast_async, broadcast_async_, global_process_set, synchronize)

try:  # cloudpickle also handles lambdas and locally defined classes, as Horovod
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover - cloudpickle is optional
    _pickler = pickle


def _broadcast_into_async(tensor, root_rank, name):
    """Start broadcasting into ``tensor`` in place, staging non-contiguous/CUDA tensors."""
    if tensor.device.type == "cpu" and tensor.is_contiguous():
        return broadcast_async_(tensor, root_rank, name)
    inner = broadcast_async(tensor, root_rank, name)

    def finish(_results):
        _copy_back(tensor, synchronize(inner))
        return tensor
    return _register([], finish)


def broadcast_parameters(params, root_rank):
    """Overwrite parameters/buffers on every rank with ``root_rank``'s values, in place.

    ``params``: ``model.state_dict()`` (a dict; entries are broadcast under their keys),
    ``model.named_parameters()`` or ``model.parameters()`` (any iterable of tensors or of
    ``(name, tensor)`` pairs). Every rank must pass the same structure.
    """
    if isinstance(params, dict):
        items = sorted(params.items(), key=lambda kv: str(kv[0]))
    else:
        try:
            items = [p if isinstance(p, tuple) else (None, p) for p in params]
        except TypeError:
            raise ValueError("invalid params of type: %s" % type(params)) from None
    handles = []
    for name, p in items:
        if not isinstance(p, torch.Tensor):
            raise ValueError(f"broadcast_parameters: entry {name!r} is a {type(p).__name__}, "
                             f"not a tensor")
        handles.append(_broadcast_into_async(p, root_rank, name))
    for h in handles:
        synchronize(h)


_TensorSlot = namedtuple("_TensorSlot", "index shape dtype")


def _strip_tensors(obj, tensors):
    """Copy of ``obj`` with every tensor replaced by a _TensorSlot (appended to ``tensors``)."""
    if isinstance(obj, torch.Tensor):
        tensors.append(obj)
        return _TensorSlot(len(tensors) - 1, tuple(obj.shape), obj.dtype)
    if isinstance(obj, dict):
        return {k: _strip_tensors(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_strip_tensors(v, tensors) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_strip_tensors(v, tensors) for v in obj)
    return obj


def _fill_tensors(obj, tensors):
    if isinstance(obj, _TensorSlot):
        return tensors[obj.index]
    if isinstance(obj, dict):
        return {k: _fill_tensors(v, tensors) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_fill_tensors(v, tensors) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_fill_tensors(v, tensors) for v in obj)
    return obj


def broadcast_optimizer_state(optimizer, root_rank):
    """Make every rank's optimizer state and hyper-parameters equal to ``root_rank``'s.

    Works for any ``torch.optim.Optimizer`` (plain or DistributedOptimizer): the structure
    of root's ``state_dict()`` (with scalars and hyper-parameters such as ``lr``) is sent as
    one pickled object, its tensors by in-place broadcasts, and the other ranks load the
    result with ``load_state_dict``. An optimizer whose state is still empty on root leaves
    every rank with empty state (no parameter is touched).
    """
    if getattr(optimizer, "_hvd_sharded", False):
        return optimizer._broadcast_state(root_rank)   # each rank holds a different shard
    is_root = _hvd.rank() == root_rank
    tensors = []
    structure = _strip_tensors(optimizer.state_dict(), tensors) if is_root else None
    structure = broadcast_object(structure, root_rank, name="broadcast_optimizer_state.structure")
    if not is_root:
        def collect(obj):
            if isinstance(obj, _TensorSlot):
                tensors.append(torch.empty(obj.shape, dtype=obj.dtype))
            elif isinstance(obj, dict):
                for v in obj.values():
                    collect(v)
            elif isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
                for v in obj:
                    collect(v)
        collect(structure)
    handles = [_broadcast_into_async(t, root_rank, f"broadcast_optimizer_state.{i}")
               for i, t in enumerate(tensors)]
    for h in handles:
        synchronize(h)
    if not is_root:
        optimizer.load_state_dict(_fill_tensors(structure, tensors))


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Pickle ``obj`` on ``root_rank`` and return it (unpickled) on every rank.

    Unnamed calls are numbered in call order, so every rank must make them in the same order.
    """
    _check_process_set(process_set)
    name = _ops.auto_name("broadcast_object", name)
    if _hvd.rank() == root_rank:
        payload = _pickler.dumps(obj)
        size = torch.tensor([len(payload)], dtype=torch.int64)
    else:
        size = torch.zeros(1, dtype=torch.int64)
    broadcast_(size, root_rank, name + ".sz")
    if _hvd.rank() == root_rank:
        data = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
    else:
        data = torch.empty(int(size.item()), dtype=torch.uint8)
    broadcast_(data, root_rank, name + ".t")
    if _hvd.rank() == root_rank:
        return obj
    return _pickler.loads(data.numpy().tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Pickle ``obj`` on every rank; return the list of every rank's object, in rank order."""
    _check_process_set(process_set)
    name = _ops.auto_name("allgather_object", name)
    payload = _pickler.dumps(obj)
    sizes = allgather(torch.tensor([len(payload)], dtype=torch.int64), name=name + ".sz")
    data = allgather(torch.frombuffer(bytearray(payload), dtype=torch.uint8), name=name + ".t")
    raw = data.numpy().tobytes()
    out, start = [], 0
    for n in sizes.tolist():
        out.append(_pickler.loads(raw[start:start + n]))
        start += n
    return out
