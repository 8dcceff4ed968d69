"""Collectives on torch tensors, with Horovod's ``horovod.torch`` signatures.

Every op hands the tensor's memory straight to the C++ core through DLPack (no copy) when
the tensor is a contiguous CPU tensor. Other tensors are staged:

- a non-contiguous tensor is copied to a contiguous one for the out-of-place ops; the
  in-place ops (``allreduce_``, ``grouped_allreduce_``, ``broadcast_`` and their
  ``*_async_`` forms) raise :class:`~hvdlite.exceptions.HvdliteInvalidArgumentError`
  instead, since the result could not land in the caller's tensor without a hidden copy;
- a CUDA tensor goes to the core as it is, with the current stream of its device, when the
  core loaded a CUDA runtime (``hvdlite.cuda_built()``): the core stages it through pinned
  host memory asynchronously (Note [device staging] in csrc/device/staging.h) and ``wait()``
  makes the then-current stream wait for the results, as c10d's ``Work.wait()``. Over NCCL
  the allgather, alltoall and reducescatter outputs are allocated on the device; staged, the
  host waits for them and they are then moved to the device. Without a CUDA runtime it is
  copied to the CPU.

The synchronous ops are autograd functions whose gradients follow
:data:`hvdlite.policy.GRADIENTS` (Horovod's rules, shared with the TensorFlow adapter).

``*_async`` functions return a :class:`~hvdlite.work.Work`; ``int(work)`` is Horovod's
int handle, and :func:`poll` / :func:`synchronize` accept either.
``synchronize`` returns what the synchronous form returns.
"""

import torch

import hvdlite as _hvd
from hvdlite import ops as _ops, policy
from hvdlite.convert.torch_requests import (allreduce_group, start_allgather,
                                            start_allreduce, start_alltoall, start_broadcast,
                                            start_reducescatter, start_sparse_allreduce)
from hvdlite.convert.torch_tensors import group_wire, require_tensor, require_tensors
from hvdlite.policy import (GRADIENTS, Adasum, Average, Max, Min, Product, Sum,  # noqa: F401
                            compressed, decompressed, member_names, resolve_op)
from hvdlite.policy.options import is_compressed
from hvdlite.exceptions import HvdliteInvalidArgumentError
from hvdlite.ops import poll, synchronize  # noqa: F401
from hvdlite.process_sets import (ProcessSet, add_process_set,  # noqa: F401
                                  global_process_set, remove_process_set, set_size)

from .compression import Compression


def _needs_grad(*tensors):
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _first(values):
    return values[0]


# ---------------------------------------------------------------------------------------
# allreduce

def _backward_allreduce(grads, ctx):
    rule = GRADIENTS["allreduce"]
    return grouped_allreduce([g.contiguous() for g in grads], op=rule.op(ctx.op),
                             prescale_factor=ctx.pre, postscale_factor=ctx.post,
                             process_set=ctx.process_set)


class _GroupedAllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, names, op, pre, post, wire, process_set, *tensors):
        ctx.op, ctx.pre, ctx.post, ctx.process_set = op, pre, post, process_set
        return tuple(start_allreduce(tensors, names, op, pre, post, wire, process_set,
                                      False, "allreduce", wake=False).wait())

    @staticmethod
    def backward(ctx, *grads):
        return (None,) * 6 + tuple(_backward_allreduce(grads, ctx))


def _allreduce_group(tensors, names, op, pre, post, compression, process_set, opname):
    """The synchronous (differentiable) grouped all-reduce, with any compression."""
    require_tensors(tensors, names, opname)
    if not _needs_grad(*tensors):
        return allreduce_group(tensors, names, op, pre, post, compression, process_set, opname)
    wire, python_side = group_wire(compression, tensors)
    sent, ctxs = compressed(compression, tensors, python_side)
    outs = list(_GroupedAllreduceFn.apply(names, op, pre, post, wire, process_set, *sent))
    return decompressed(compression, outs, ctxs, python_side)


def _allreduce_async_group(tensors, names, average, op, pre, post, compression, process_set,
                           inplace, opname, single=False, wake=True):
    op = resolve_op(op, average, opname)
    require_tensors(tensors, names, opname)
    wire, python_side = group_wire(compression, tensors)
    if python_side:
        raise HvdliteInvalidArgumentError(
            f"hvdlite.torch.{opname}: only Compression.none/fp16/bf16 are supported here; "
            f"use the synchronous out-of-place form for a custom compressor")
    return start_allreduce(tensors, names, op, pre, post, wire, process_set, inplace, opname,
                            _first if single else None, wake)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set, compression=None):
    """Start averaging (or summing, ...) ``tensor`` over all ranks into a new tensor."""
    return _allreduce_async_group([tensor], [name], average, op, prescale_factor,
                                  postscale_factor, compression, process_set, False,
                                  "allreduce_async", single=True)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Average (or sum, min, max, multiply) ``tensor`` over all ranks; return a new tensor.

    The reduction is keyed by ``name`` (generated in call order if None). ``op`` is one of
    Average (default), Sum, Adasum, Min, Max, Product; ``prescale_factor``/``postscale_factor``
    multiply the tensor before/after the reduction. Differentiable.
    """
    return _allreduce_group([tensor], [name], resolve_op(op, average, "allreduce"),
                            prescale_factor, postscale_factor, compression, process_set,
                            "allreduce")[0]


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set, compression=None):
    """In-place :func:`allreduce_async`: the result is written into ``tensor`` (contiguous)."""
    return _allreduce_async_group([tensor], [name], average, op, prescale_factor,
                                  postscale_factor, compression, process_set, True,
                                  "allreduce_async_", single=True)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set, compression=None):
    """In-place :func:`allreduce`; returns ``tensor``. Not differentiable."""
    return _allreduce_async_group([tensor], [name], average, op, prescale_factor,
                                  postscale_factor, compression, process_set, True,
                                  "allreduce_async_", single=True, wake=False).wait()


def _grouped_async(tensors, average, name, op, pre, post, process_set, compression, inplace,
                   opname):
    tensors = list(tensors)
    return _allreduce_async_group(tensors, member_names(name, len(tensors)), average, op,
                                  pre, post, compression, process_set, inplace, opname)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set,
                            compression=None):
    """Start all-reducing a list of tensors as one group; ``synchronize`` returns a list."""
    return _grouped_async(tensors, average, name, op, prescale_factor, postscale_factor,
                          process_set, compression, False, "grouped_allreduce_async")


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """All-reduce a list of tensors as one group (negotiated and fused together).

    ``name`` is a base name: tensor i is reduced under ``f"{name}.{i}"``. Returns a list.
    """
    op = resolve_op(op, average, "grouped_allreduce")
    tensors = list(tensors)
    if not tensors:
        return []
    return _allreduce_group(tensors, member_names(name, len(tensors)), op, prescale_factor,
                            postscale_factor, compression, process_set, "grouped_allreduce")


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set,
                             compression=None):
    """In-place :func:`grouped_allreduce_async` (every tensor must be contiguous)."""
    return _grouped_async(tensors, average, name, op, prescale_factor, postscale_factor,
                          process_set, compression, True, "grouped_allreduce_async_")


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set, compression=None):
    """In-place :func:`grouped_allreduce`; returns the list of (same) tensors."""
    return grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                    postscale_factor, process_set, compression).wait()


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Start reducing a sparse COO tensor by all-gathering its indices and values (as
    Horovod); ``synchronize`` returns the coalesced sparse result."""
    op = resolve_op(op, None, "sparse_allreduce_async")
    return start_sparse_allreduce(tensor, name, op, process_set, "sparse_allreduce_async")


# ---------------------------------------------------------------------------------------
# allgather

def _backward_allgather(grads, dims, process_set):
    """Horovod's allgather gradient: average the incoming gradients, keep this rank's rows."""
    rule = GRADIENTS["allgather"]
    reduced = grouped_allreduce([g.contiguous() for g in grads], op=rule.op(Sum),
                                process_set=process_set)
    sizes = allgather(torch.tensor(dims, dtype=torch.int64).view(1, -1),
                      process_set=process_set)
    rank = (process_set or global_process_set).rank()
    out = []
    for i, g in enumerate(reduced):
        offset, rows = policy.own_rows(sizes[:, i].tolist(), rank)
        out.append(g.narrow(0, offset, rows))
    return out


class _GroupedAllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, names, process_set, *tensors):
        ctx.dims, ctx.process_set = [t.shape[0] for t in tensors], process_set
        return tuple(start_allgather(tensors, names, process_set, "allgather", False).wait())

    @staticmethod
    def backward(ctx, *grads):
        return (None, None) + tuple(_backward_allgather(grads, ctx.dims, ctx.process_set))


def _allgather_group(tensors, names, process_set, opname, single):
    require_tensors(tensors, names, opname)
    if _needs_grad(*tensors):
        outs = _GroupedAllgatherFn.apply(names, process_set, *tensors)
        return outs[0] if single else list(outs)
    return start_allgather(tensors, names, process_set, opname, single).wait()


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Start concatenating every rank's ``tensor`` along dimension 0 (sizes may differ)."""
    require_tensor(tensor, name, "allgather_async")
    return start_allgather([tensor], [name], process_set, "allgather_async", True)


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenate every rank's ``tensor`` along dimension 0 (first dims may differ).
    Differentiable: the gradient is this rank's rows of the averaged incoming gradient."""
    return _allgather_group([tensor], [name], process_set, "allgather", True)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Start all-gathering a list of tensors as one group."""
    tensors = list(tensors)
    return start_allgather(tensors, member_names(name, len(tensors)), process_set,
                            "grouped_allgather_async", False)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """All-gather a list of tensors as one group; returns a list. Differentiable."""
    tensors = list(tensors)
    if not tensors:
        return []
    return _allgather_group(tensors, member_names(name, len(tensors)), process_set,
                            "grouped_allgather", False)


# ---------------------------------------------------------------------------------------
# broadcast

class _BroadcastFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return start_broadcast(tensor, root_rank, name, process_set, False, "broadcast").wait()

    @staticmethod
    def backward(ctx, grad_output):
        rule = GRADIENTS["broadcast"]
        grad = allreduce(grad_output.contiguous(), op=rule.op(Sum), process_set=ctx.process_set)
        if _hvd.rank() != ctx.root_rank:     # roots are global ranks
            grad = torch.zeros_like(grad)
        return grad, None, None, None


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Start broadcasting ``tensor`` from ``root_rank`` into a new tensor."""
    return start_broadcast(tensor, root_rank, name, process_set, False, "broadcast_async")


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Return ``root_rank``'s ``tensor`` on every rank (a new tensor). Differentiable."""
    require_tensor(tensor, name, "broadcast")
    if _needs_grad(tensor):
        return _BroadcastFn.apply(tensor, root_rank, name, process_set)
    return start_broadcast(tensor, root_rank, name, process_set, False, "broadcast").wait()


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Start an in-place broadcast from ``root_rank`` into ``tensor`` (contiguous)."""
    return start_broadcast(tensor, root_rank, name, process_set, True, "broadcast_async_")


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrite ``tensor`` with ``root_rank``'s value; returns ``tensor``."""
    return start_broadcast(tensor, root_rank, name, process_set, True, "broadcast_").wait()


# ---------------------------------------------------------------------------------------
# alltoall

class _AlltoallFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        output, received = start_alltoall(tensor, splits, name, process_set, "alltoall").wait()
        ctx.received, ctx.process_set = received, process_set
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, _grad_received):
        grad, _ = alltoall(grad_output.contiguous(), splits=ctx.received,
                           process_set=ctx.process_set)
        return grad, None, None, None


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Start an alltoall; ``synchronize`` returns ``(output, received_splits)``."""
    return start_alltoall(tensor, splits, name, process_set, "alltoall_async")


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Send ``splits[i]`` rows of ``tensor`` to rank i and receive the rows sent to this rank.

    Returns the received tensor, or ``(tensor, received_splits)`` when ``splits`` was given
    (as Horovod). Differentiable: the gradient is sent back along the same routes.
    """
    require_tensor(tensor, name, "alltoall")
    if _needs_grad(tensor):
        output, received = _AlltoallFn.apply(tensor, splits, name, process_set)
    else:
        output, received = start_alltoall(tensor, splits, name, process_set, "alltoall").wait()
    return output if splits is None else (output, received)


# ---------------------------------------------------------------------------------------
# reducescatter

class _GroupedReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, names, op, pre, post, process_set, *tensors):
        ctx.op, ctx.pre, ctx.post, ctx.process_set = op, pre, post, process_set
        return tuple(start_reducescatter(tensors, names, op, pre, post, process_set,
                                          "reducescatter", False).wait())

    @staticmethod
    def backward(ctx, *grads):
        scale = policy.gradient_scale("reducescatter", ctx.op, ctx.pre, ctx.post,
                                       set_size(ctx.process_set))
        grads = [(g * scale if scale != 1.0 else g).contiguous() for g in grads]
        return (None,) * 5 + tuple(allgather(g, process_set=ctx.process_set) for g in grads)


def _reducescatter_group(tensors, name, compression, op, pre, post, process_set, opname,
                         single):
    op = resolve_op(op, None, opname)
    names = [name] if single else member_names(name, len(tensors))
    require_tensors(tensors, names, opname)
    python_side = is_compressed(compression)
    sent, ctxs = compressed(compression, tensors, python_side)
    if _needs_grad(*sent):
        outs = list(_GroupedReducescatterFn.apply(names, op, pre, post, process_set, *sent))
    else:
        outs = start_reducescatter(sent, names, op, pre, post, process_set, opname,
                                   False).wait()
    outs = decompressed(compression, outs, ctxs, python_side)
    return outs[0] if single else outs


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Start a reduce-scatter; ``synchronize`` returns this rank's share of dimension 0."""
    return start_reducescatter([tensor], [name], resolve_op(op, None, "reducescatter_async"),
                                prescale_factor, postscale_factor, process_set,
                                "reducescatter_async", True)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduce ``tensor`` over ranks and return this rank's share of dimension 0.

    Rows are split as in Horovod: each rank gets ``n // size`` rows, the first
    ``n % size`` ranks one more. Differentiable (Horovod's gradient: the all-gather of the
    incoming gradients, times size for Sum, times the scale factors).
    """
    return _reducescatter_group([tensor], name, compression, op, prescale_factor,
                                postscale_factor, process_set, "reducescatter", True)


def grouped_reducescatter_async(tensors, name=None, op=Average,
                                process_set=global_process_set, prescale_factor=1.0,
                                postscale_factor=1.0):
    """Start reduce-scattering a list of tensors as one group."""
    tensors = list(tensors)
    return start_reducescatter(tensors, member_names(name, len(tensors)),
                                resolve_op(op, None, "grouped_reducescatter_async"),
                                prescale_factor, postscale_factor, process_set,
                                "grouped_reducescatter_async", False)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Reduce-scatter a list of tensors as one group; returns a list. Differentiable."""
    tensors = list(tensors)
    if not tensors:
        return []
    return _reducescatter_group(tensors, name, compression, op, prescale_factor,
                                postscale_factor, process_set, "grouped_reducescatter", False)


# ---------------------------------------------------------------------------------------
# barrier / join

def barrier(process_set=global_process_set):
    """Block until every rank (of ``process_set``) has called ``barrier``."""
    _ops.barrier_async(process_set=process_set).wait()


def join(device=-1):
    """This rank has no more data: take part (with zeros) in the other ranks' all-reduces
    until every rank has joined. Returns the rank that joined last. ``device`` is accepted
    for Horovod compatibility (hvdlite reduces in host memory)."""
    return _ops.join_async(finish=_ops.last_joined_rank).wait()
