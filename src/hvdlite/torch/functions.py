"""Model/optimizer/object broadcast helpers, as ``horovod.torch.functions``."""

import torch

import hvdlite as _hvd
from hvdlite import nested_state, numpy_api as _np_api, ops as _ops, policy
from hvdlite.numpy_api import allgather_object, broadcast_object  # noqa: F401
from hvdlite.work import wait_all

from hvdlite.convert.torch_tensors import check_tensor, copy_back, host as host_copy, stream

from ._wrap import SynchronizeProtocol
from .mpi_ops import global_process_set


def _broadcast_into_async(tensor, root_rank, name, process_set=global_process_set):
    """Start broadcasting into ``tensor`` in place, staging non-contiguous/CUDA tensors."""
    check_tensor(tensor, name, "broadcast_parameters")
    host, copied = host_copy(tensor)
    finish = (lambda _: copy_back(tensor, host)) if copied else None
    return _ops.broadcast_async(host, root_rank, host, name, process_set, finish,
                                stream=stream([host]))


def broadcast_parameters(params, root_rank, prefix=None):
    """Overwrite parameters/buffers on every rank with ``root_rank``'s values, in place.

    ``params``: ``model.state_dict()`` (a dict; entries are broadcast under their keys),
    ``model.named_parameters()`` or ``model.parameters()`` (any iterable of tensors or of
    ``(name, tensor)`` pairs). Every rank must pass the same structure.
    """
    works = []
    for name, p in policy.named_entries(params, prefix):
        if not isinstance(p, torch.Tensor):
            raise ValueError(f"broadcast_parameters: entry {name!r} is a {type(p).__name__}, "
                             f"not a tensor")
        works.append(_broadcast_into_async(p, root_rank, name))
    wait_all(works)


def _initialize_state(optimizer, model):
    """A fresh optimizer has no state yet: take one step with zero gradients so that it
    exists on every rank (as Horovod), then broadcast it like any other state."""
    sparse = set()
    if model is not None:
        for m in model.modules():
            if isinstance(m, torch.nn.Embedding) and m.sparse:
                sparse.update(id(p) for p in m.parameters())
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
                if isinstance(optimizer, torch.optim.SparseAdam) or id(p) in sparse:
                    p.grad = p.grad.to_sparse()
    if isinstance(optimizer, SynchronizeProtocol):
        # the wrapped optimizer's own step: no all-reduce that other ranks would not join
        optimizer._base_step()
    else:
        optimizer.step()


def broadcast_optimizer_state(optimizer, root_rank, model=None):
    """Make every rank's optimizer state and hyper-parameters equal to ``root_rank``'s.

    Works for any ``torch.optim.Optimizer`` (plain or DistributedOptimizer): a fresh
    optimizer's state is first created by a step with zero gradients (as Horovod); then the
    structure of root's ``state_dict()`` (with scalars and hyper-parameters such as ``lr``)
    is sent as one pickled object, its tensors by in-place broadcasts, and the other ranks
    load the result with ``load_state_dict``. ``model`` identifies sparse embeddings.
    """
    if getattr(optimizer, "_hvd_sharded", False):
        return optimizer._broadcast_state(root_rank)   # each rank holds a different shard
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if not optimizer.state_dict()["state"]:
        _initialize_state(optimizer, model)
    state = optimizer.state_dict()
    if not state["state"]:
        return  # a stateless optimizer: hyper-parameters only
    is_root = _hvd.rank() == root_rank
    skeleton, tensors = nested_state.split(state, torch.is_tensor) if is_root else (None, [])
    skeleton = _np_api.broadcast_object(skeleton, root_rank,
                                        name="broadcast_optimizer_state.structure")
    if not is_root:
        tensors = [torch.empty(s.shape, dtype=s.dtype) for s in nested_state.slots(skeleton)]
    wait_all([_broadcast_into_async(t, root_rank, f"broadcast_optimizer_state.{i}")
              for i, t in enumerate(tensors)])
    if not is_root:
        optimizer.load_state_dict(nested_state.join(skeleton, tensors))
