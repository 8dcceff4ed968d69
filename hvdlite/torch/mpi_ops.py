"""Collectives on torch tensors, with Horovod's ``horovod.torch`` signatures.

Every op hands the tensor's memory straight to the C++ core through DLPack (no copy) when
the tensor is a contiguous CPU tensor. Other tensors are staged:

- a non-contiguous tensor is copied to a contiguous one for the out-of-place ops
  (``allreduce``, ``allgather``, ``broadcast``, ``alltoall``, ``reducescatter``); the
  in-place ops (``allreduce_``, ``grouped_allreduce_``, ``broadcast_`` and their
  ``*_async_`` forms) raise :class:`~hvdlite.exceptions.HvdliteInvalidArgumentError`
  instead, since the result could not land in the caller's tensor without a hidden copy;
- a CUDA tensor goes through host memory (hvdlite is built without NCCL): it is copied to
  the CPU, reduced there and copied back into (or returned on) its device.

The synchronous ops (``allreduce``, ``grouped_allreduce``, ``allgather``, ``broadcast``,
``alltoall``, ``reducescatter``) are autograd functions, with Horovod's gradients.

``*_async`` functions return an int handle for :func:`poll` and :func:`synchronize`;
``synchronize`` returns what the synchronous form returns.
"""

import functools
import itertools
import threading
import warnings

import torch

import hvdlite as _hvd
from hvdlite import ops as _ops
from hvdlite.exceptions import HvdliteInvalidArgumentError

from .compression import Compression, NoneCompressor

# Reduce ops, numbered as in Horovod.
Average = _ops.Average
Sum = _ops.Sum
Adasum = _ops.Adasum
Min = _ops.Min
Max = _ops.Max
Product = _ops.Product

#: torch dtypes the core reduces/moves. Anything else raises HvdliteInvalidArgumentError.
SUPPORTED_DTYPES = (torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16,
                    torch.bfloat16, torch.float32, torch.float64, torch.bool)
_SUPPORTED = frozenset(SUPPORTED_DTYPES)
# dtypes the core can pack as fp16/bf16 on the wire (Compression.fp16 / .bf16).
_WIRE_PACKABLE = frozenset((torch.float32, torch.float64))


# ---------------------------------------------------------------------------------------
# process sets: hvdlite has one, the global set. Accepted so Horovod scripts that pass it
# explicitly keep working.

class ProcessSet:
    """The set of all ranks (hvdlite has no other process sets)."""
    process_set_id = 0

    def included(self):
        return True

    def rank(self):
        return _hvd.rank()

    def size(self):
        return _hvd.size()

    def __repr__(self):
        return "ProcessSet(global)"


global_process_set = ProcessSet()


def _check_process_set(process_set):
    if process_set is not None and process_set is not global_process_set:
        raise NotImplementedError("hvdlite supports only the global process set")


# ---------------------------------------------------------------------------------------
# handles

_handles = {}          # adapter handle -> (core handles, finish(results) -> output)
_handle_ids = itertools.count(1)
_handle_lock = threading.Lock()


def _register(core_handles, finish):
    with _handle_lock:
        handle = next(_handle_ids)
        _handles[handle] = (list(core_handles), finish)
    return handle


def _reset_handles():
    with _handle_lock:
        _handles.clear()


def _lookup(handle, what):
    with _handle_lock:
        entry = _handles.get(handle)
    if entry is None:
        raise HvdliteInvalidArgumentError(
            f"hvdlite.torch.{what}: unknown handle {handle!r} (already synchronized, or not "
            f"returned by an hvdlite.torch *_async function)")
    return entry


def poll(handle):
    """True once the operation behind ``handle`` has finished; ``synchronize`` then won't block."""
    core_handles, _ = _lookup(handle, "poll")
    return all(_ops.poll(h) for h in core_handles)


def synchronize(handle):
    """Wait for an ``*_async`` operation and return its result (tensor, list or tuple)."""
    core_handles, finish = _lookup(handle, "synchronize")
    with _handle_lock:
        _handles.pop(handle, None)
    return finish(_ops.wait_all(core_handles))


# ---------------------------------------------------------------------------------------
# argument handling

def _resolve_op(op, average):
    """Horovod's ``average`` (deprecated) / ``op`` rules."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    return Average if op is None else op


def _describe(tensor, name):
    label = f"'{name}'" if name is not None else "(unnamed)"
    return (f"tensor {label} (shape {list(tensor.shape)}, dtype {tensor.dtype}, "
            f"device {tensor.device})")


def _require_tensor(tensor, name, opname):
    if not isinstance(tensor, torch.Tensor):
        raise HvdliteInvalidArgumentError(
            f"hvdlite.torch.{opname}: expected a torch.Tensor"
            f"{'' if name is None else f' for {name!r}'}, got {type(tensor).__name__}")


def _check_tensor(tensor, name, opname, inplace=False):
    _require_tensor(tensor, name, opname)
    if tensor.layout != torch.strided:
        raise HvdliteInvalidArgumentError(
            f"hvdlite.torch.{opname}: {_describe(tensor, name)} has layout {tensor.layout}; "
            f"only dense tensors are supported (use .to_dense())")
    if tensor.dtype not in _SUPPORTED:
        raise HvdliteInvalidArgumentError(
            f"hvdlite.torch.{opname}: {_describe(tensor, name)} has dtype {tensor.dtype}, "
            f"which hvdlite does not support; supported dtypes: "
            f"{', '.join(str(d).replace('torch.', '') for d in SUPPORTED_DTYPES)}")
    if inplace and not tensor.is_contiguous():
        out_of_place = opname.rstrip("_")
        raise HvdliteInvalidArgumentError(
            f"hvdlite.torch.{opname}: {_describe(tensor, name)} is not contiguous; in-place "
            f"operations write the result into the tensor's memory and need a contiguous "
            f"tensor. Pass t.contiguous() (and use that tensor), or use the out-of-place "
            f"{out_of_place}().")


def _host(tensor):
    """(contiguous CPU tensor without autograd, copied?) for handing to the core.

    Contiguous CPU tensors are returned as a detached view of the same memory.
    """
    t = tensor.detach()
    copied = False
    if t.device.type != "cpu":
        t = t.to("cpu")
        copied = True
    if not t.is_contiguous():
        t = t.contiguous()
        copied = True
    if t.is_neg():
        t = t.resolve_neg()
        copied = True
    return t, copied


def _from_core(array, is_bfloat16):
    """Wrap a core-allocated (writeable) numpy output as a torch tensor without copying."""
    t = torch.from_numpy(array)
    if is_bfloat16:
        t = t.view(torch.bfloat16)
    return t


def _to_device(t, device):
    return t if device.type == "cpu" else t.to(device)


def _copy_back(dst, src):
    """Write the host result ``src`` into the caller's (CUDA) tensor ``dst``."""
    with torch.no_grad():
        dst.detach().copy_(src)


def _wire_compression(compression, tensor):
    """(wire format for the core or None, whether to run compress/decompress in Python)."""
    if compression is None or compression is NoneCompressor:
        return None, False
    wire = getattr(compression, "wire_dtype", None)
    if wire is not None:
        if tensor.dtype in _WIRE_PACKABLE:
            return wire, False
        if not tensor.dtype.is_floating_point:
            return None, False       # built-in compressors leave integer tensors alone
    return None, True


def _needs_grad(*tensors):
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


# ---------------------------------------------------------------------------------------
# allreduce

def _start_grouped_allreduce(tensors, names, op, prescale_factor, postscale_factor, wire,
                             inplace, opname, group_output=True):
    """Enqueue the all-reduce of ``tensors`` (one negotiation/fusion group); return a handle."""
    tensors = list(tensors)
    if names is None:
        names = [None] * len(tensors)
    for t, n in zip(tensors, names):
        _check_tensor(t, n, opname, inplace=inplace)
    bufs, outs, copy_back = [], [], []
    for t in tensors:
        host, copied = _host(t)
        if inplace or copied:
            # The core reduces in place: into the caller's memory (in-place op), or into
            # the host copy we made anyway (which then is the result).
            bufs.append(host)
            outs.append(host)
            copy_back.append(inplace and copied)
        else:
            out = torch.empty(host.shape, dtype=host.dtype)
            bufs.append(host)
            outs.append(out)
            copy_back.append(False)
    core_names = None if all(n is None for n in names) else [
        _ops.auto_name("allreduce", n) for n in names]
    core_handles = _ops.grouped_allreduce_async(
        bufs, outs, core_names, op, prescale_factor, postscale_factor, wire)

    def finish(_results):
        results = []
        for t, out, back in zip(tensors, outs, copy_back):
            if inplace:
                if back:
                    _copy_back(t, out)
                results.append(t)
            else:
                results.append(_to_device(out, t.device))
        return results if group_output else results[0]

    return _register(core_handles, finish)


def _allreduce_nograd(tensor, name, op, prescale_factor, postscale_factor, wire):
    return synchronize(_start_grouped_allreduce(
        [tensor], [name], op, prescale_factor, postscale_factor, wire, False, "allreduce",
        group_output=False))


class _AllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, wire):
        ctx.op, ctx.prescale_factor, ctx.postscale_factor = op, prescale_factor, postscale_factor
        return _allreduce_nograd(tensor, name, op, prescale_factor, postscale_factor, wire)

    @staticmethod
    def backward(ctx, grad_output):
        grad = allreduce(grad_output, op=ctx.op, prescale_factor=ctx.prescale_factor,
                         postscale_factor=ctx.postscale_factor)
        return grad, None, None, None, None, None


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set, compression=None):
    """Start averaging (or summing, ...) ``tensor`` over all ranks into a new tensor.

    ``compression`` (hvdlite extension) takes ``Compression.fp16``/``Compression.bf16``
    (packed by the core); other compressors need the synchronous :func:`allreduce`.
    Returns a handle for :func:`poll`/:func:`synchronize`.
    """
    _require_tensor(tensor, name, "allreduce_async")
    _check_process_set(process_set)
    op = _resolve_op(op, average)
    wire, python_side = _wire_compression(compression, tensor)
    if python_side:
        raise HvdliteInvalidArgumentError(
            "allreduce_async: only Compression.none/fp16/bf16 are supported here; use "
            "allreduce() for a custom compressor")
    return _start_grouped_allreduce([tensor], [name], op, prescale_factor, postscale_factor,
                                    wire, False, "allreduce_async", group_output=False)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Average (or sum, min, max, multiply) ``tensor`` over all ranks; return a new tensor.

    The reduction is keyed by ``name`` (auto-generated in call order if None): every rank
    must reduce a tensor of the same shape and dtype under that name. ``op`` is one of
    Average (default), Sum, Min, Max, Product; ``prescale_factor``/``postscale_factor``
    multiply the tensor before/after the reduction. Differentiable: the gradient is the
    all-reduce of the incoming gradient with the same op and factors.
    """
    _require_tensor(tensor, name, "allreduce")
    _check_process_set(process_set)
    op = _resolve_op(op, average)
    wire, python_side = _wire_compression(compression, tensor)
    ctx = None
    if python_side:
        tensor, ctx = compression.compress(tensor)
    if _needs_grad(tensor):
        _check_tensor(tensor, name, "allreduce")
        out = _AllreduceFn.apply(tensor, name, op, prescale_factor, postscale_factor, wire)
    else:
        out = _allreduce_nograd(tensor, name, op, prescale_factor, postscale_factor, wire)
    return compression.decompress(out, ctx) if python_side else out


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set, compression=None):
    """In-place :func:`allreduce_async`: the result is written into ``tensor`` (contiguous)."""
    _require_tensor(tensor, name, "allreduce_async_")
    _check_process_set(process_set)
    op = _resolve_op(op, average)
    wire, python_side = _wire_compression(compression, tensor)
    if python_side:
        raise HvdliteInvalidArgumentError(
            "allreduce_async_: only Compression.none/fp16/bf16 are supported for in-place "
            "all-reduce")
    return _start_grouped_allreduce([tensor], [name], op, prescale_factor, postscale_factor,
                                    wire, True, "allreduce_async_", group_output=False)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set, compression=None):
    """In-place :func:`allreduce`; returns ``tensor``. Not differentiable."""
    _require_tensor(tensor, name, "allreduce_")
    _check_process_set(process_set)
    op = _resolve_op(op, average)
    wire, python_side = _wire_compression(compression, tensor)
    if python_side:
        raise HvdliteInvalidArgumentError(
            "allreduce_: only Compression.none/fp16/bf16 are supported for in-place all-reduce")
    return synchronize(_start_grouped_allreduce(
        [tensor], [name], op, prescale_factor, postscale_factor, wire, True, "allreduce_",
        group_output=False))


def _group_names(name, n):
    return [None] * n if name is None else [f"{name}.{i}" for i in range(n)]


def _group_wire(compression, tensors, opname):
    for i, t in enumerate(tensors):
        _require_tensor(t, f"tensors[{i}]", opname)
    wires = set()
    python_side = False
    for t in tensors:
        w, p = _wire_compression(compression, t)
        wires.add(w)
        python_side = python_side or p
    wires.discard(None)
    return (wires.pop() if wires else None), python_side


class _GroupedAllreduceFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, wire, *tensors):
        ctx.op, ctx.prescale_factor, ctx.postscale_factor = op, prescale_factor, postscale_factor
        return tuple(synchronize(_start_grouped_allreduce(
            tensors, _group_names(name, len(tensors)), op, prescale_factor, postscale_factor,
            wire, False, "grouped_allreduce")))

    @staticmethod
    def backward(ctx, *grads):
        reduced = grouped_allreduce(list(grads), op=ctx.op, prescale_factor=ctx.prescale_factor,
                                    postscale_factor=ctx.postscale_factor)
        return (None, None, None, None, None, *reduced)


def _grouped_allreduce_async(tensors, average, name, op, prescale_factor, postscale_factor,
                             process_set, compression, inplace, opname):
    _check_process_set(process_set)
    op = _resolve_op(op, average)
    tensors = list(tensors)
    wire, python_side = _group_wire(compression, tensors, opname)
    if python_side:
        raise HvdliteInvalidArgumentError(
            f"{opname}: only Compression.none/fp16/bf16 are supported by the async forms; "
            "use grouped_allreduce() for a custom compressor")
    return _start_grouped_allreduce(tensors, _group_names(name, len(tensors)), op,
                                    prescale_factor, postscale_factor, wire, inplace, opname)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set,
                            compression=None):
    """Start all-reducing a list of tensors as one group; ``synchronize`` returns a list."""
    return _grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                    postscale_factor, process_set, compression, False,
                                    "grouped_allreduce_async")


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """All-reduce a list of tensors as one group (negotiated and fused together).

    ``name`` is a base name: tensor i is reduced under ``f"{name}.{i}"``. Returns a list.
    Differentiable like :func:`allreduce`.
    """
    _check_process_set(process_set)
    op = _resolve_op(op, average)
    tensors = list(tensors)
    if not tensors:
        return []
    wire, python_side = _group_wire(compression, tensors, "grouped_allreduce")
    ctxs = [None] * len(tensors)
    if python_side:
        pairs = [compression.compress(t) for t in tensors]
        tensors = [p[0] for p in pairs]
        ctxs = [p[1] for p in pairs]
    if _needs_grad(*tensors):
        for i, t in enumerate(tensors):
            _check_tensor(t, None if name is None else f"{name}.{i}", "grouped_allreduce")
        outs = list(_GroupedAllreduceFn.apply(name, op, prescale_factor, postscale_factor, wire,
                                              *tensors))
    else:
        outs = synchronize(_start_grouped_allreduce(
            tensors, _group_names(name, len(tensors)), op, prescale_factor, postscale_factor,
            wire, False, "grouped_allreduce"))
    if python_side:
        outs = [compression.decompress(o, c) for o, c in zip(outs, ctxs)]
    return outs


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set,
                             compression=None):
    """In-place :func:`grouped_allreduce_async` (every tensor must be contiguous)."""
    return _grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                    postscale_factor, process_set, compression, True,
                                    "grouped_allreduce_async_")


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set, compression=None):
    """In-place :func:`grouped_allreduce`; returns the list of (same) tensors."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set, compression))


# ---------------------------------------------------------------------------------------
# allgather

def _start_allgather(tensor, name, opname):
    _check_tensor(tensor, name, opname)
    if tensor.dim() == 0:
        raise HvdliteInvalidArgumentError(
            f"hvdlite.torch.{opname}: {_describe(tensor, name)} is a scalar; allgather "
            f"concatenates along dimension 0 and needs at least one dimension (use t.view(1))")
    host, _ = _host(tensor)
    h = _ops.allgather_async(host, name)
    device = tensor.device

    def finish(results):
        r = results[0]
        return _to_device(_from_core(r.output, r.bfloat16), device)

    return _register([h], finish)


def allgather_async(tensor, name=None, process_set=global_process_set):
    """Start concatenating every rank's ``tensor`` along dimension 0 (sizes may differ)."""
    _check_process_set(process_set)
    return _start_allgather(tensor, name, "allgather_async")


class _AllgatherFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name):
        ctx.dim = tensor.shape[0]
        return synchronize(_start_allgather(tensor, name, "allgather"))

    @staticmethod
    def backward(ctx, grad_output):
        # Horovod: average the incoming gradients over ranks, keep this rank's rows.
        grad_reduced = allreduce(grad_output, op=Average)
        dims = allgather(torch.tensor([ctx.dim], dtype=torch.int64))
        r = _hvd.rank()
        offset = int(dims[:r].sum().item()) if r > 0 else 0
        return grad_reduced.narrow(0, offset, ctx.dim), None


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenate every rank's ``tensor`` along dimension 0 (first dims may differ).

    Differentiable (Horovod semantics): the gradient is this rank's slice of the incoming
    gradient averaged over ranks.
    """
    _require_tensor(tensor, name, "allgather")
    _check_process_set(process_set)
    if _needs_grad(tensor):
        _check_tensor(tensor, name, "allgather")
        return _AllgatherFn.apply(tensor, name)
    return synchronize(_start_allgather(tensor, name, "allgather"))


# ---------------------------------------------------------------------------------------
# broadcast

def _start_broadcast(tensor, root_rank, name, inplace, opname):
    _check_tensor(tensor, name, opname, inplace=inplace)
    host, copied = _host(tensor)
    if inplace or copied:
        out = host
        h = _ops.broadcast_async(host, _ops.root_rank_arg(root_rank), None, name)
    else:
        out = torch.empty(host.shape, dtype=host.dtype)
        h = _ops.broadcast_async(host, _ops.root_rank_arg(root_rank), out, name)

    def finish(_results):
        if inplace:
            if copied:
                _copy_back(tensor, out)
            return tensor
        return _to_device(out, tensor.device)

    return _register([h], finish)


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Start broadcasting ``tensor`` from ``root_rank`` into a new tensor."""
    _check_process_set(process_set)
    return _start_broadcast(tensor, root_rank, name, False, "broadcast_async")


class _BroadcastFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name):
        ctx.root_rank = root_rank
        return synchronize(_start_broadcast(tensor, root_rank, name, False, "broadcast"))

    @staticmethod
    def backward(ctx, grad_output):
        # Horovod: the averaged gradient flows to the root's input; other inputs get zero.
        grad_reduced = allreduce(grad_output, op=Average)
        if _hvd.rank() != ctx.root_rank:
            grad_reduced = torch.zeros_like(grad_reduced)
        return grad_reduced, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Return ``root_rank``'s ``tensor`` on every rank (a new tensor). Differentiable."""
    _require_tensor(tensor, name, "broadcast")
    _check_process_set(process_set)
    if _needs_grad(tensor):
        _check_tensor(tensor, name, "broadcast")
        return _BroadcastFn.apply(tensor, root_rank, name)
    return synchronize(_start_broadcast(tensor, root_rank, name, False, "broadcast"))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Start an in-place broadcast from ``root_rank`` into ``tensor`` (contiguous)."""
    _check_process_set(process_set)
    return _start_broadcast(tensor, root_rank, name, True, "broadcast_async_")


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrite ``tensor`` with ``root_rank``'s value; returns ``tensor``."""
    _check_process_set(process_set)
    return synchronize(_start_broadcast(tensor, root_rank, name, True, "broadcast_"))


# ---------------------------------------------------------------------------------------
# alltoall

def _splits_list(splits, opname):
    if splits is None:
        return None
    if isinstance(splits, torch.Tensor):
        if splits.dtype.is_floating_point or splits.dim() > 1:
            raise HvdliteInvalidArgumentError(
                f"hvdlite.torch.{opname}: splits must be a 1-D integer tensor or a list of ints")
        return _ops.splits_arg(splits.tolist())
    return _ops.splits_arg(splits)


def _start_alltoall(tensor, splits, name, opname):
    _check_tensor(tensor, name, opname)
    split_list = _splits_list(splits, opname)
    host, _ = _host(tensor)
    h = _ops.alltoall_async(host, split_list, name)
    device = tensor.device

    def finish(results):
        r = results[0]
        out = _to_device(_from_core(r.output, r.bfloat16), device)
        received = torch.tensor(list(r.received_splits or []), dtype=torch.int32)
        return out, received

    return _register([h], finish)


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Start an alltoall; ``synchronize`` returns ``(output, received_splits)``."""
    _check_process_set(process_set)
    return _start_alltoall(tensor, splits, name, "alltoall_async")


class _AlltoallFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name):
        output, received = synchronize(_start_alltoall(tensor, splits, name, "alltoall"))
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return output, received

    @staticmethod
    def backward(ctx, grad_output, _grad_received):
        grad, _ = alltoall(grad_output, splits=ctx.received)
        return grad, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Send ``splits[i]`` rows of ``tensor`` to rank i and receive the rows sent to this rank.

    ``splits`` (list or 1-D int tensor) defaults to equal parts. Returns the received
    tensor, or ``(tensor, received_splits)`` when ``splits`` was given (as Horovod).
    Differentiable: the gradient is sent back along the same routes.
    """
    _require_tensor(tensor, name, "alltoall")
    _check_process_set(process_set)
    if _needs_grad(tensor):
        _check_tensor(tensor, name, "alltoall")
        output, received = _AlltoallFn.apply(tensor, splits, name)
    else:
        output, received = synchronize(_start_alltoall(tensor, splits, name, "alltoall"))
    return output if splits is None else (output, received)


# ---------------------------------------------------------------------------------------
# reducescatter

def _start_reducescatter(tensor, name, op, prescale_factor, postscale_factor, opname):
    _check_tensor(tensor, name, opname)
    host, _ = _host(tensor)
    h = _ops.reducescatter_async(host, name, op, prescale_factor, postscale_factor)
    device = tensor.device

    def finish(results):
        r = results[0]
        return _to_device(_from_core(r.output, r.bfloat16), device)

    return _register([h], finish)


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Start a reduce-scatter; ``synchronize`` returns this rank's share of dimension 0."""
    _check_process_set(process_set)
    return _start_reducescatter(tensor, name, op, prescale_factor, postscale_factor,
                                "reducescatter_async")


class _ReducescatterFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor):
        ctx.op, ctx.scale = op, prescale_factor * postscale_factor
        return synchronize(_start_reducescatter(tensor, name, op, prescale_factor,
                                                postscale_factor, "reducescatter"))

    @staticmethod
    def backward(ctx, grad_output):
        grad = allgather(grad_output.contiguous())
        scale = ctx.scale / _hvd.size() if ctx.op == Average else ctx.scale
        if scale != 1.0:
            grad = grad * scale
        return grad, None, None, None, None


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduce ``tensor`` over ranks and return this rank's share of dimension 0.

    Rows are split as in Horovod: each rank gets ``n // size`` rows, the first
    ``n % size`` ranks one more. Differentiable: the gradient is the all-gather of the
    incoming gradients, scaled like the forward reduction.
    """
    _require_tensor(tensor, name, "reducescatter")
    _check_process_set(process_set)
    ctx = None
    python_side = compression is not None and compression is not NoneCompressor
    if python_side:
        tensor, ctx = compression.compress(tensor)
    if _needs_grad(tensor):
        _check_tensor(tensor, name, "reducescatter")
        out = _ReducescatterFn.apply(tensor, name, op, prescale_factor, postscale_factor)
    else:
        out = synchronize(_start_reducescatter(tensor, name, op, prescale_factor,
                                               postscale_factor, "reducescatter"))
    return compression.decompress(out, ctx) if python_side else out


# ---------------------------------------------------------------------------------------
# barrier / join

def barrier(process_set=global_process_set):
    """Block until every rank has called ``barrier``."""
    _check_process_set(process_set)
    _ops.wait(_ops.barrier_async())


def join(device=-1):
    """This rank has no more data: take part (with zeros) in the other ranks' all-reduces
    until every rank has joined. Returns the rank that joined last."""
    result = _ops.wait(_ops.join_async())
    return -1 if result.last_joined_rank is None else int(result.last_joined_rank)


# ---------------------------------------------------------------------------------------
# init / shutdown: clear this module's handle table like Horovod does.

@functools.wraps(_hvd.init)
def init(*args, **kwargs):
    _reset_handles()
    return _hvd.init(*args, **kwargs)


@functools.wraps(_hvd.shutdown)
def shutdown(*args, **kwargs):
    _reset_handles()
    return _hvd.shutdown(*args, **kwargs)
