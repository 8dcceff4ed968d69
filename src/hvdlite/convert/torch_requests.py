"""Core requests on torch tensors, without autograd: each checks its tensors once, stages
them in host memory and returns the :class:`~hvdlite.work.Work` whose ``wait()`` gives torch
tensors. ``hvdlite.torch`` adds autograd on top; the Keras torch bridge calls these as they
are. ``op`` is resolved already (:func:`hvdlite.policy.resolve_op`)."""

import torch

from hvdlite import ops, policy
from hvdlite.exceptions import HvdliteInvalidArgumentError, HvdliteUnsupportedError
from hvdlite.process_sets import global_process_set

from .torch_tensors import (Staged, check_tensor, check_tensors, describe, from_core,
                            group_wire, host, stream)


def core_names(kind, names, process_set):
    return [policy.auto_name(kind, n, ops.process_set_id(process_set)) for n in names]


def start_allreduce(tensors, names, op, pre, post, wire, process_set, inplace, opname,
                     finish=None, wake=True):
    """wake=False when the caller waits at once (its wait runs the engine's round)."""
    tensors = list(tensors)
    check_tensors(tensors, names, opname, inplace)
    return submit_allreduce(Staged(tensors, inplace), names, op, pre, post, wire, process_set,
                            finish, wake)


def submit_allreduce(staged, names, op, pre, post, wire, process_set, finish=None, wake=True):
    """The all-reduce of checked tensors as ``staged``; ``wait()`` gives ``staged.finish``'s
    tensors (through ``finish``, if given)."""
    return ops.grouped_allreduce_async(
        staged.bufs, staged.outs, core_names("allreduce", names, process_set), op, pre, post,
        wire, process_set,
        staged.finish if finish is None else (lambda r: finish(staged.finish(r))), wake=wake,
        stream=stream(staged.bufs))


def allreduce_group(tensors, names, op, pre, post, compression, process_set, opname):
    """The grouped all-reduce of torch tensors with any compression, waited for (no
    autograd). Each tensor sent is checked once, where it is staged."""
    wire, python_side = group_wire(compression, tensors)
    sent, ctxs = policy.compressed(compression, tensors, python_side)
    outs = start_allreduce(sent, names, op, pre, post, wire, process_set, False, opname,
                           wake=False).wait()
    return policy.decompressed(compression, outs, ctxs, python_side)


def start_sparse_allreduce(tensor, name, op, process_set, opname):
    """Horovod's sparse all-reduce of a COO tensor: its indices and values all-gathered;
    ``wait()`` gives the coalesced sparse result."""
    divisor = policy.gathered_rows_divisor(
        op, (process_set or global_process_set).size(),
        f"hvdlite.torch.{opname}: tensor '{name}' is sparse", "its rows are all-gathered",
        HvdliteUnsupportedError)
    t = tensor.coalesce()
    indices, values = t.indices().t().contiguous(), t.values().contiguous()
    for part, label in ((indices, "indices"), (values, "values")):
        check_tensor(part, f"{name}.{label}", opname)
    shape, device = t.size(), tensor.device

    def finish(results):
        idx, vals = (from_core(r, device) for r in results)
        if divisor != 1:
            vals = vals / divisor
        return torch.sparse_coo_tensor(idx.t(), vals, shape, check_invariants=False).coalesce()

    hosts = [host(indices)[0], host(values)[0]]
    return ops.grouped_allgather_async(hosts, [f"{name}.indices", f"{name}.values"],
                                       process_set, finish, stream=stream(hosts))


def check_gatherable(tensor, name, opname):
    check_tensor(tensor, name, opname)
    if tensor.dim() == 0:
        raise HvdliteInvalidArgumentError(
            f"hvdlite.torch.{opname}: {describe(tensor, name)} is a scalar; allgather "
            f"concatenates along dimension 0 and needs at least one dimension (use t.view(1))")


def start_allgather(tensors, names, process_set, opname, single):
    for t, n in zip(tensors, names):
        check_gatherable(t, n, opname)
    hosts = [host(t)[0] for t in tensors]
    devices = [t.device for t in tensors]

    def finish(results):
        outs = [from_core(r, d) for r, d in zip(results, devices)]
        return outs[0] if single else outs
    return ops.grouped_allgather_async(hosts, core_names("allgather", names, process_set),
                                       process_set, finish, stream=stream(hosts), device_output=True)


def start_broadcast(tensor, root_rank, name, process_set, inplace, opname):
    check_tensor(tensor, name, opname, inplace=inplace)
    staged = Staged([tensor], inplace)
    return ops.broadcast_async(staged.bufs[0], root_rank, staged.outs[0], name, process_set,
                               lambda r: staged.finish(r)[0], stream=stream(staged.bufs))


def splits_list(splits, opname):
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        if splits.dtype.is_floating_point or splits.dim() > 1:
            raise HvdliteInvalidArgumentError(
                f"hvdlite.torch.{opname}: splits must be a 1-D integer tensor or a list of ints")
        return ops.splits_arg(splits.tolist())
    return ops.splits_arg(splits)


def start_alltoall(tensor, splits, name, process_set, opname):
    check_tensor(tensor, name, opname)
    device = tensor.device

    def finish(results):
        received = torch.tensor(list(results[0].received_splits or []), dtype=torch.int32)
        return from_core(results[0], device), received
    buf = host(tensor)[0]
    return ops.alltoall_async(buf, splits_list(splits, opname), name, process_set, finish,
                              stream=stream([buf]), device_output=True)


def start_reducescatter(tensors, names, op, pre, post, process_set, opname, single):
    for t, n in zip(tensors, names):
        check_tensor(t, n, opname)
        if t.dim() == 0:
            raise HvdliteInvalidArgumentError(
                f"hvdlite.torch.{opname}: {describe(t, n)} is a scalar; reducescatter "
                f"splits dimension 0 and needs at least one dimension")
    devices = [t.device for t in tensors]

    def finish(results):
        outs = [from_core(r, d) for r, d in zip(results, devices)]
        return outs[0] if single else outs
    bufs = [host(t)[0] for t in tensors]
    return ops.grouped_reducescatter_async(bufs, core_names("reducescatter", names, process_set),
                                           op, pre, post, process_set, finish,
                                           stream=stream(bufs), device_output=True)
