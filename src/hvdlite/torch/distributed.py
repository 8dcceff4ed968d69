"""``torch.distributed`` backend ``"hvdlite"``: c10d collectives on hvdlite's engine.

Importing this module registers the backend (CPU tensors) and the ``hvdlite://``
rendezvous. Under ``hvdlite-run`` or ``mpirun``::

    import torch.distributed as dist
    import hvdlite.torch.distributed  # noqa: F401  registers "hvdlite"
    dist.init_process_group("hvdlite", init_method="hvdlite://")

starts hvdlite's engine (or joins the one ``hvdlite.init()`` started) and takes rank and
world size from it; ``hvdlite://`` also gives torch a real key-value store (a TCPStore on
rank 0 whose address travels through the engine). ``dist.init_process_group("hvdlite")``
with no init_method does the same unless all of torchrun's variables are set (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``: then torch's ``env://`` is used, as long as
the processes were started by MPI); where only ``MASTER_ADDR`` / ``MASTER_PORT`` are (sbatch
scripts written for torchrun), rank 0's store listens there (Note [start-up without
init_method] in src/hvdlite/c10d/startup.py).

The process group is a Python subclass of ``torch.distributed.ProcessGroup`` (c10d's
``PyProcessGroup``): DDP's reducer and ``torch.distributed``'s functions call it; it hands
the tensors' memory to hvdlite's core through DLPack, as ``hvdlite.torch`` does, and
returns a :class:`HvdliteWork` whose future completes when the engine finishes. This module
converts tensors and glues c10d; what a call means (its name in call order, Note [c10d
names]; timeouts; sizes and splits; process sets; start-up) is decided in src/hvdlite/c10d/.

``send``/``recv``/``isend``/``irecv`` (with tags, from any source) and ``batch_isend_irecv``
run on the group's point-to-point channel in the core (src/hvdlite/p2p.py), beside the engine:
they are not collective, so nothing about them is negotiated or named.
"""

import datetime
import functools
import inspect
import math
import socket
import threading

import torch
import torch.distributed as dist

import hvdlite
from hvdlite import ops as _ops
from hvdlite import p2p as _p2p
from hvdlite.c10d import group_sets, shapes, startup
from hvdlite.c10d.call_work import CallWork, CoalescedWork, PeerCallWork
from hvdlite.c10d.calls import REDUCE_OPS, CallOrder, members, named_error, reduce_op, seconds
from hvdlite.c10d.shapes import describe
from hvdlite.exceptions import (HvdliteInvalidArgumentError, HvdliteTimeoutError,
                                HvdliteUnsupportedError)
from hvdlite.policy.dtypes import SUPPORTED_DTYPES

BACKEND = startup.BACKEND

# dtypes the core moves; other tensors travel as bytes where no arithmetic is done
_CORE_DTYPES = {getattr(torch, name) for name in SUPPORTED_DTYPES if hasattr(torch, name)}


# Note [c10d calls under torch.compile]
# Dynamo treats every torch.distributed.ProcessGroup as an opaque object
# (torch.distributed.device_mesh registers the class, subclasses included, with a few members
# it may read: size, rank, group_name...), and attribute access to any other member is a hard
# error (UnsafeScriptObjectError), never a graph break. gloo's collectives are C++, which
# dynamo never sees. This group's are Python frames, and C++ enters them while dynamo's frame
# callback is set: in torch.compile(DistributedDataParallel(model)), DDP's forward runs
# (skipped by dynamo, not compiled) under the compiled module's call, and its reducer's
# C++ (_rebuild_buckets after the first backward, buffer broadcasts) calls the group's
# broadcast and waits on the Work; dynamo then compiles each such frame as one of its own
# and stops at the first `self._calls`. So the entry points of the group and of its Works
# run with dynamo off (torch.compiler.disable, recursive): the frame and whatever it calls
# run eagerly, as gloo's C++ does, and compiled code that calls one breaks the graph there.
# The entry points are the methods overriding torch's, and the public ones the class itself
# defines (getRank, getSize...: c10d's C++ calls them through its trampoline); the helpers
# they call are not wrapped (a wrapper costs about a microsecond, nested ones as much again).

def _eager(cls):
    """``cls`` with its entry points wrapped in ``torch.compiler.disable`` (Note [c10d calls
    under torch.compile]): every method that overrides one of its torch bases' (ProcessGroup's,
    Work's), and every public method of its own."""
    ours = [b for b in cls.__mro__ if b.__module__.startswith("hvdlite.")]
    torch_names = {n for b in cls.__mro__ if b not in ours and b is not object for n in vars(b)}
    own_public = {n for n in vars(cls) if not n.startswith("_")}
    for name in sorted(torch_names | own_public):
        if name.startswith("__"):
            continue
        owner = next((b for b in cls.__mro__ if name in vars(b)), None)
        member = vars(owner)[name]
        if owner in ours and inspect.isfunction(member) and \
                not hasattr(member, "_torchdynamo_disable"):
            setattr(cls, name, torch.compiler.disable(member))
    return cls


class GroupTimeoutError(HvdliteTimeoutError, dist.DistBackendError):
    """A collective of an hvdlite group outlived its timeout (the group's, as
    ``init_process_group(timeout=...)`` / ``new_group(timeout=...)`` set it, or the call's):
    an hvdlite timeout and, as c10d's backends raise them, a ``DistBackendError``."""


@_eager
class HvdliteWork(CallWork, dist._Work):
    """A c10d Work over one hvdlite Work (src/hvdlite/c10d/call_work.py): its future is torch's,
    its timeout error a ``DistBackendError``."""

    future_type = torch.futures.Future
    timeout_error = GroupTimeoutError

    def __init__(self, pending, value, what, timeout=None):
        dist._Work.__init__(self)
        CallWork.__init__(self, pending, value, what, timeout)

    def synchronize(self):
        pass  # CPU only: nothing is pending on a stream


@_eager
class _PeerToPeerWork(PeerCallWork, HvdliteWork):
    """A send or recv's Work, as c10d sees it."""


@_eager
class _AllOf(CoalescedWork, HvdliteWork):
    """A coalescing block's Work, as c10d sees it."""


# ---------------------------------------------------------------------------------------
# tensors in and out of the core

def _check_tensor(t, what, label):
    if not isinstance(t, torch.Tensor):
        raise HvdliteInvalidArgumentError(f"{what}: {label} is a {type(t).__name__}, not a tensor")
    if t.layout != torch.strided:
        raise HvdliteInvalidArgumentError(
            f"{what}: {label} has layout {t.layout}; the hvdlite backend takes dense tensors")
    if t.device.type != "cpu":
        raise HvdliteUnsupportedError(
            f"{what}: {label} is on {t.device}; the hvdlite backend was registered for CPU "
            f"tensors (use a 'cpu:hvdlite,cuda:nccl' backend string for GPU tensors)")


def _contiguous(t):
    """(a contiguous tensor with t's values, whether it is a copy)."""
    t = t.detach()
    if t.is_contiguous() and not t.is_conj() and not t.is_neg():
        return t, False
    return t.resolve_conj().resolve_neg().contiguous(), True


def _wire(t):
    """``t`` (contiguous) as the core may move it without arithmetic: itself, or its bytes
    (complex, uint32, float8, ...) with the leading dimension kept."""
    if t.dtype in _CORE_DTYPES:
        return t
    if t.dim() == 0:
        t = t.reshape(1)
    return t.reshape(t.shape[0], math.prod(t.shape[1:])).view(torch.uint8)


def _buffers(tensors, what, reduced=False):
    """``tensors`` checked (and reducible), as contiguous buffers: (buffers, whether each is
    a copy, to be written back after the call)."""
    bufs, back = [], []
    for i, t in enumerate(tensors):
        _check_tensor(t, what, f"tensor {i}")
        if reduced:
            _reducible(t, what, f"tensor {i}")
        buf, copied = _contiguous(t)
        bufs.append(buf)
        back.append(copied)
    return bufs, back


def _copied_back(tensors, bufs, back):
    """A call's finish step: the buffers that are copies written back into their tensors."""
    def finish(_results):
        for t, buf, copy_back in zip(tensors, bufs, back):
            if copy_back:
                _into(t, buf)
        return tensors
    return finish


def _flat_wire(t):
    """``t``'s values in one dimension, as the core moves them (elements or bytes)."""
    return _wire(t.detach().reshape(-1, 1)).reshape(-1)


def _reducible(t, what, label):
    if t.dtype not in _CORE_DTYPES:
        raise HvdliteUnsupportedError(
            f"{what}: {label} ({describe(t)}) has dtype {t.dtype}, which hvdlite cannot reduce "
            f"(supported: {', '.join(sorted(str(d).replace('torch.', '') for d in _CORE_DTYPES))})")


def _from_core(result):
    """The core-allocated output as a tensor (no copy)."""
    t = torch.from_numpy(result.output)
    return t.view(torch.bfloat16) if result.bfloat16 else t


def _landing(outputs, rows, copies):
    """The outputs a collective's results may land in directly (Note [outputs the caller
    gives] in csrc/algorithms/collectives.cc): each output as ``copies`` of its input's row
    ``rows[i]`` (1 x n, as the core moves it), or None (the results are copied) unless every
    output is contiguous and of its row's dtype."""
    if outputs is None:
        return None
    given = []
    for out, row in zip(outputs, rows):
        if not out.is_contiguous() or out.is_conj() or out.is_neg():
            return None
        wire = _wire(out.detach().reshape(copies, -1))
        if wire.dtype != row.dtype or wire.numel() != copies * row.numel():
            return None
        given.append(wire)
    return given


def _into(dst, src):
    """Copy the flat values ``src`` (any dtype of equal bytes) into the tensor ``dst``."""
    if src.dtype != dst.dtype:     # bytes back into the tensor's dtype
        src = src.reshape(-1).view(dst.dtype)
    with torch.no_grad():
        dst.copy_(src.reshape(dst.shape))


_CORE_OPS = {getattr(dist.ReduceOp, name): op for name, op in REDUCE_OPS.items()}


def _op(op, what):
    """The core's reduce op for c10d's ``op`` (a ReduceOp, or its enum value); the table is
    looked up by enum value first (a string of the enum costs a microsecond a call)."""
    op = getattr(op, "op", op)
    return _CORE_OPS[op] if op in _CORE_OPS else reduce_op(op, what)


# ---------------------------------------------------------------------------------------
# the process group

@_eager
class HvdliteProcessGroup(dist.ProcessGroup):
    """A c10d process group whose collectives run on hvdlite's engine (see the module
    docstring). ``process_set``: the hvdlite ProcessSet of its ranks (None: every rank)."""

    def __init__(self, rank, size, process_set, group_name, store=None, timeout=None):
        # (rank, size): c10d 2.13's trampoline cannot be built from (store, rank, size)
        super().__init__(rank, size)
        self._store = store
        self._timeout = seconds(timeout)   # Note [group timeouts]
        self._rank, self._size = rank, size
        self._set = process_set
        self._ranks = (list(range(hvdlite.size())) if process_set is None
                       else list(process_set.ranks))
        self._label = group_name
        self._calls = CallOrder(group_name, _ops.process_set_id(process_set))  # Note [c10d names]
        self._group_name, self._group_desc = group_name, "undefined"
        self._coalesced = None   # Works issued between _start_coalescing and _end_coalescing

    # -- identity -----------------------------------------------------------------------

    def getBackendName(self):
        return BACKEND

    def getRank(self):
        return self._rank

    def getSize(self):
        return self._size

    # c10d keeps a group's name and description in its backends, which this group has none
    # of: they live here.
    def getGroupName(self):
        return self._group_name

    def setGroupName(self, name):
        self._group_name = name

    def getGroupDesc(self):
        return self._group_desc

    def setGroupDesc(self, desc):
        self._group_desc = desc

    @property
    def _device_types(self):
        return [torch.device("cpu")]

    def __repr__(self):
        return f"HvdliteProcessGroup(group {self._label!r}, rank {self._rank} of {self._ranks})"

    # -- issuing a call -----------------------------------------------------------------

    def _root(self, group_rank, what):
        return group_sets.global_rank(self._ranks, group_rank, what)

    def _is_root(self, group_rank, what):
        return self._ranks[self._rank] == self._root(group_rank, what)

    def _check_per_rank(self, what, tensors, label, like, like_label, **why):
        shapes.check_per_rank(what, tensors, label, like, like_label, self._size,
                              lambda x, x_label: _check_tensor(x, what, x_label), **why)

    def _issue(self, start, value, what, async_op, timeout=None, work_type=None):
        """Run ``start()`` (an hvdlite Work, or None where it finished the call); wait here
        unless the call is asynchronous. ``timeout``: the call's own (c10d options), else the
        group's (Note [group timeouts]); ``work_type``: the Work's class (HvdliteWork)."""
        try:
            pending = start()
        except Exception as e:  # noqa: BLE001 - raised with the c10d call named
            raise named_error(e, what) from None
        limit = self._timeout if timeout is None else seconds(timeout) or self._timeout
        work = (work_type or HvdliteWork)(pending, value, what, limit)
        if not async_op and pending is not None:
            work.wait()
        if self._coalesced is not None:
            self._coalesced.append(work)
        return work

    # -- all-reduce ---------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        opts = opts or dist.AllreduceOptions()
        if any(isinstance(t, torch.Tensor) and t.layout == torch.sparse_coo for t in tensors):
            return self._sparse_allreduce(list(tensors), opts.reduceOp, opts.asyncOp)
        return self._allreduce(list(tensors), opts.reduceOp, opts.asyncOp, "allreduce")

    def _sparse_allreduce(self, tensors, op, async_op):
        """A sparse COO tensor (e.g. the gradient of ``nn.Embedding(sparse=True)`` under DDP),
        summed as gloo sums it: every rank's indices and values are all-gathered (ranks may
        hold different numbers of them), their sum is coalesced, and it replaces the tensor's
        contents in place."""
        name, what = self._calls.next("allreduce_sparse")
        if len(tensors) != 1 or tensors[0].layout != torch.sparse_coo:
            raise HvdliteInvalidArgumentError(
                f"{what}: a sparse all-reduce takes one sparse COO tensor; got "
                f"{[getattr(t, 'layout', type(t).__name__) for t in tensors]}")
        if getattr(op, "op", op) != dist.ReduceOp.SUM:
            raise HvdliteUnsupportedError(
                f"{what}: sparse tensors are reduced with SUM only (as gloo); got "
                f"{getattr(op, 'op', op)}")
        t = tensors[0]
        if t.device.type != "cpu":
            raise HvdliteUnsupportedError(f"{what}: the sparse tensor is on {t.device}, not the CPU")
        _reducible(t, what, "tensor 0")
        c = t.detach().coalesce()
        indices = c.indices().t().contiguous()      # nnz x sparse dims
        values = c.values().contiguous()            # nnz x dense dims

        def finish(results):
            gathered = _from_core(results[1]).reshape(-1, *values.shape[1:])
            summed = torch.sparse_coo_tensor(_from_core(results[0]).t(), gathered, t.shape)
            with torch.no_grad():
                t.copy_(summed.coalesce())
            return tensors

        return self._issue(lambda: _ops.grouped_allgather_async(
            [indices, values], members(name, 2), process_set=self._set, finish=finish),
            tensors, what, async_op)

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        return self._allreduce(list(tensors), opts.reduceOp, opts.asyncOp, "allreduce_coalesced")

    def _allreduce(self, tensors, reduce_op, async_op, kind, outputs=None):
        """``outputs``: where a non-root of reduce() receives (its input left alone)."""
        name, what = self._calls.next(kind)
        op = _op(reduce_op, what)
        bufs, back = _buffers(tensors, what, reduced=True)
        outs, back = (bufs, back) if outputs is None else (outputs, [False] * len(bufs))
        names = members(name, len(tensors))
        finish = _copied_back(tensors, outs, back)
        if async_op or any(back):
            start = functools.partial(_ops.grouped_allreduce_async, bufs, outs, names, op,
                                      process_set=self._set, finish=finish, wake=True)
        elif len(bufs) == 1:   # the calling thread runs the engine's rounds: no thread handoff
            start = functools.partial(_ops.allreduce, bufs[0], outs[0], names[0], op,
                                      process_set=self._set)
        else:
            start = functools.partial(_ops.grouped_allreduce, bufs, outs, names, op,
                                      process_set=self._set)
        return self._issue(start, tensors, what, async_op)

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        tensors = list(tensors)
        scratch = (None if self._is_root(opts.rootRank, "reduce")
                   else [torch.empty(t.shape, dtype=t.dtype) for t in tensors])
        return self._allreduce(tensors, opts.reduceOp, opts.asyncOp, "reduce", outputs=scratch)

    # -- broadcast ----------------------------------------------------------------------

    def broadcast(self, tensors, opts=None):
        opts = opts or dist.BroadcastOptions()
        tensors = list(tensors)
        name, what = self._calls.next("broadcast")
        root = self._root(opts.rootRank, what)
        shapes.check_equal(what, "rootTensor", opts.rootTensor, 0, HvdliteUnsupportedError)
        bufs, back = _buffers(tensors, what)
        return self._issue(lambda: _ops.grouped_broadcast_async(
            [_wire(b) for b in bufs], root, None, members(name, len(tensors)),
            process_set=self._set, finish=_copied_back(tensors, bufs, back)),
            tensors, what, opts.asyncOp)

    # -- all-gather ---------------------------------------------------------------------

    def _gather_into(self, kind, pairs, async_op, value, wholes=None):
        """All-gather each input flat (one row per rank) and copy the rows into the outputs.

        ``pairs``: (input, [output per group rank] or None on a rank that keeps nothing).
        ``wholes``: one tensor per input that the rows fill (all_gather_into_tensor's output):
        the rows land there directly where it can take them (Note [outputs the caller
        gives] in csrc/algorithms/collectives.cc), else they are copied.
        """
        name, what = self._calls.next(kind)
        rows = []
        for i, (t, outs) in enumerate(pairs):
            _check_tensor(t, what, f"input {i}")
            if outs is not None:
                self._check_per_rank(what, outs, f"output {i}", t, f"input {i}")
            rows.append(_wire(_contiguous(t)[0].reshape(1, -1)))
        given = _landing(wholes, rows, self._size)

        def finish(results):
            for (t, outs), r in zip(pairs, results):
                if r.output is not None:   # None: landed in the output given
                    for o, row in zip(outs or (), _from_core(r)):
                        _into(o, row)
            return value

        return self._issue(lambda: _ops.grouped_allgather_async(
            rows, members(name, len(rows)), process_set=self._set, finish=finish,
            outputs=given), value, what, async_op)

    def allgather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.AllgatherOptions()
        return self._gather_into("allgather", list(zip(input_tensors, output_tensors)),
                                 opts.asyncOp, output_tensors)

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        # c10d's layout: output_lists[rank][i] receives input i of that rank.
        opts = opts or dist.AllgatherOptions()
        shapes.check_lists("allgather_coalesced", [len(o) for o in output_lists],
                           len(input_tensors), self._size)
        pairs = [(t, [output_lists[r][i] for r in range(self._size)])
                 for i, t in enumerate(input_tensors)]
        return self._gather_into("allgather_coalesced", pairs, opts.asyncOp, output_lists)

    def all_gather_single(self, output, input, opts=None):
        return self.all_gather_single_coalesced([output], [input], opts, "all_gather_single")

    def all_gather_single_coalesced(self, outputs, inputs, opts=None,
                                    kind="all_gather_single_coalesced"):
        opts = opts or dist.AllgatherOptions()
        for o, t in zip(outputs, inputs):
            shapes.check_blocks(kind, o, "the output", t, "the input", self._size,
                                same_dtype=False)
            if not o.is_contiguous():
                raise HvdliteInvalidArgumentError(f"{kind}: the output tensor must be contiguous")
        pairs = [(t, list(o.view(self._size, -1))) for o, t in zip(outputs, inputs)]
        return self._gather_into(kind, pairs, opts.asyncOp, outputs, wholes=outputs)

    _allgather_base = all_gather_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def gather(self, output_lists, input_tensors, opts=None):
        opts = opts or dist.GatherOptions()
        mine = self._is_root(opts.rootRank, "gather")
        if mine:
            shapes.check_equal("gather", "the number of the root's output lists",
                               len(output_lists), len(input_tensors))
        pairs = [(t, output_lists[i] if mine else None) for i, t in enumerate(input_tensors)]
        return self._gather_into("gather", pairs, opts.asyncOp, output_lists)

    # -- reduce-scatter -----------------------------------------------------------------

    def _scatter_reduced(self, kind, pairs, opts, value):
        """Reduce ``size`` equal blocks per input across ranks; block r goes to rank r.

        ``pairs``: (output, [block per group rank]) or (output, one tensor of size blocks).
        """
        opts = opts or dist.ReduceScatterOptions()
        name, what = self._calls.next(kind)
        op = _op(opts.reduceOp, what)
        stacks = []
        for i, (out, blocks) in enumerate(pairs):
            _check_tensor(out, what, f"output {i}")
            _reducible(out, what, f"output {i}")
            if isinstance(blocks, torch.Tensor):
                _check_tensor(blocks, what, f"input {i}")
                shapes.check_blocks(what, blocks, f"input {i}", out, f"output {i}", self._size)
                stacks.append(_contiguous(blocks)[0].reshape(self._size, -1))
            else:
                self._check_per_rank(what, blocks, f"input {i}", out, f"output {i}",
                                     error=HvdliteUnsupportedError,
                                     why="; the hvdlite backend scatters equal blocks")
                stacks.append(torch.stack([b.detach().reshape(-1) for b in blocks]))
        given = _landing([out for out, _ in pairs], [s[:1] for s in stacks], 1)

        def finish(results):
            for (out, _), r in zip(pairs, results):
                if r.output is not None:   # None: landed in the output given
                    _into(out, _from_core(r))
            return value

        return self._issue(lambda: _ops.grouped_reducescatter_async(
            stacks, members(name, len(stacks)), op, process_set=self._set,
            finish=finish, outputs=given), value, what, opts.asyncOp)

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        return self._scatter_reduced("reduce_scatter", list(zip(output_tensors, input_lists)),
                                     opts, output_tensors)

    def reduce_scatter_single(self, output, input, opts=None):
        return self._scatter_reduced("reduce_scatter_single", [(output, input)], opts, [output])

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        return self._scatter_reduced("reduce_scatter_single_coalesced",
                                     list(zip(outputs, inputs)), opts, outputs)

    _reduce_scatter_base = reduce_scatter_single
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # -- all-to-all and scatter ---------------------------------------------------------

    def _alltoall(self, what, name, send, splits, async_op, finish, value):
        """Send ``splits[r]`` rows of ``send`` (equal parts: None) to group rank r, or, for a
        list, ``send[r]``; ``finish(result)`` takes what arrived."""
        if isinstance(send, list):
            send, splits = torch.cat(send), [f.numel() for f in send]
        return self._issue(lambda: _ops.alltoall_async(
            send, splits, name, process_set=self._set,
            finish=lambda results: finish(results[0])), value, what, async_op)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,
                          opts=None):
        opts = opts or dist.AllToAllOptions()
        name, what = self._calls.next("all_to_all_single")
        _check_tensor(input, what, "input")
        _check_tensor(output, what, "output")
        in_splits, out_splits = list(input_split_sizes) or None, list(output_split_sizes)
        shapes.check_splits(what, input.shape[0] if input.dim() else None, in_splits,
                            self._size)
        rows = _wire(_contiguous(input)[0].reshape(input.shape[0], math.prod(input.shape[1:])))

        def finish(result):
            if out_splits:
                shapes.check_received(what, "rows", list(result.received_splits or []),
                                      out_splits, "output_split_sizes is")
            _into(output, _from_core(result))
            return [output]

        return self._alltoall(what, name, rows, in_splits, opts.asyncOp, finish, [output])

    alltoall_base = all_to_all_single

    def alltoall(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.AllToAllOptions()
        name, what = self._calls.next("alltoall")
        inputs, outputs = list(input_tensors), list(output_tensors)
        for label, ts in (("input", inputs), ("output", outputs)):
            shapes.check_count(what, label, len(ts), self._size)
            for i, t in enumerate(ts):
                _check_tensor(t, what, f"{label} {i}")
        shapes.check_one_dtype(what, inputs + outputs)

        def finish(result):
            wanted = [_flat_wire(o).numel() for o in outputs]
            shapes.check_received(what, "elements", list(result.received_splits or []),
                                  wanted, "the outputs hold")
            for o, part in zip(outputs, _from_core(result).reshape(-1).split(wanted)):
                _into(o, part)
            return outputs

        return self._alltoall(what, name, [_flat_wire(t) for t in inputs], None, opts.asyncOp,
                              finish, outputs)

    def scatter(self, output_tensors, input_lists, opts=None):
        """The root sends block r to rank r: an all-to-all in which only the root sends."""
        opts = opts or dist.ScatterOptions()
        name, what = self._calls.next("scatter")
        mine = self._is_root(opts.rootRank, what)
        shapes.check_equal(what, "the number of output tensors", len(output_tensors), 1,
                           HvdliteUnsupportedError)
        out = output_tensors[0]
        _check_tensor(out, what, "output")
        if mine:
            blocks = list(input_lists[0])
            self._check_per_rank(what, blocks, "the root's scatter list", out, "the output")
            flat = [_flat_wire(b) for b in blocks]
        else:
            flat = [_flat_wire(out.new_empty((0, 1)))] * self._size

        def finish(result):
            _into(out, _from_core(result).reshape(-1))
            return output_tensors

        return self._alltoall(what, name, flat, None, opts.asyncOp, finish, output_tensors)

    # -- barrier, coalescing ------------------------------------------------------------

    def barrier(self, opts=None):
        opts = opts or dist.BarrierOptions()
        name, what = self._calls.next("barrier")
        return self._issue(lambda: _ops.barrier_async(name, process_set=self._set), [], what,
                           opts.asyncOp, timeout=opts.timeout)

    def _start_coalescing(self, device):
        self._coalesced = []

    def _end_coalescing(self, device):
        works, self._coalesced = self._coalesced or [], None
        return _AllOf(works, self._timeout)

    # -- point-to-point: the group's own channel in the core, not the engine ------------

    def _p2p(self, what, tensors, peer, tag):
        """send / recv (``peer``: a rank of this group, None: any) of one CPU tensor, of any
        dtype and layout: a non-contiguous one goes through a contiguous copy (copied back
        after a recv). Never negotiated (src/hvdlite/p2p.py): the Work completes when the message
        has gone out / arrived."""
        label = f"point-to-point in group {self._label!r}"
        if len(tensors) != 1:
            raise HvdliteInvalidArgumentError(f"{label}: takes one tensor, got {len(tensors)}")
        t = tensors[0]
        _check_tensor(t, label, "the tensor")
        buf, copied = _contiguous(t)
        wire = buf.reshape(-1).view(torch.uint8)
        finish = (lambda: _into(t, buf)) if what == "recv" and copied else None
        start = _p2p.send_async if what == "send" else _p2p.recv_async
        # in a coalescing block (batch_isend_irecv), one Work for the batch
        return self._issue(lambda: start(wire, peer, tag, process_set=self._set, finish=finish),
                           [t], label, True, work_type=_PeerToPeerWork)

    def send(self, tensors, dst, tag=0):
        return self._p2p("send", tensors, dst, tag)

    def recv(self, tensors, src, tag=0):
        return self._p2p("recv", tensors, src, tag)

    def recv_anysource(self, tensors, tag=0):
        return self._p2p("recv", tensors, None, tag)

    # -- groups (src/hvdlite/c10d/group_sets.py) --------------------------------------------

    @property
    def new_group(self):
        """c10d's ``new_group`` hook, absent while ``dist.new_group`` asks for another backend
        (Note [new_group of another backend])."""
        if getattr(_other_backend_group, "active", False):
            raise AttributeError("new_group")
        return self._new_group

    def _new_group(self, ranks, timeout=None, pg_options=None, group_name=None,
                   group_desc=None):
        """c10d's ``new_group`` hook, called on every rank of the job."""
        ranks = sorted(int(r) for r in ranks)
        group_sets.check_every_rank_adds(group_name, BACKEND)
        process_set = group_sets.process_set_for(ranks)
        if hvdlite.rank() not in ranks:
            return None
        group = HvdliteProcessGroup(ranks.index(hvdlite.rank()), len(ranks), process_set,
                                    group_name, timeout=timeout)
        group._set_group_name(group_name)
        if group_desc:
            group._set_group_desc(group_desc)
        return group

    def shutdown(self):
        startup.shutdown_if_default(self)

    abort = shutdown


# ---------------------------------------------------------------------------------------
# start-up: the creator and the hvdlite:// rendezvous (src/hvdlite/c10d/startup.py)

def _create(backend_opts, pg_options):
    """``register_backend``'s creator (extended API): the group's ranks and name come in."""
    startup.start_engine()
    startup.show_errors_before_abort()
    ranks = sorted(backend_opts.global_ranks_in_group)
    group = HvdliteProcessGroup(backend_opts.group_rank, backend_opts.group_size,
                                group_sets.known_set_for(ranks, BACKEND) if ranks else None,
                                str(backend_opts.group_id), backend_opts.store,
                                timeout=backend_opts.timeout)
    if not ranks:
        startup.adopt_default_group(group, backend_opts.group_rank, backend_opts.group_size)
    return group


def _rendezvous(url, timeout=None, **kwargs):
    """``hvdlite://``: rank and world size from hvdlite's engine (started here if needed),
    and a TCPStore on rank 0 whose host and port are shared through the engine."""
    startup.start_engine()
    startup.check_url(url)
    rank, size = hvdlite.rank(), hvdlite.size()
    timeout = timeout or datetime.timedelta(minutes=30)
    master = startup.store_address(url)   # hvdlite://MASTER_ADDR:MASTER_PORT
    store, address = None, ""
    if rank == 0:
        host, port = master or (startup.store_host(), 0)
        if master is not None and not startup.is_this_host(host):
            address = f"{startup.NOT_RANK_0S_HOST}{host}:{socket.gethostname()}"
        else:
            store = dist.TCPStore(host, port, size, True, timeout, wait_for_workers=False)
            address = f"{host}:{store.port}"
    host, port = startup.share_address(address)
    if rank != 0:
        store = dist.TCPStore(host, port, size, False, timeout)
    yield store, rank, size
    raise RuntimeError("hvdlite:// rendezvous cannot be repeated")


def init_process_group(**kwargs):
    """``torch.distributed.init_process_group("hvdlite", init_method="hvdlite://", ...)``."""
    kwargs.setdefault("init_method", "hvdlite://")
    dist.init_process_group(BACKEND, **kwargs)


def _wrap_torch(name):
    """Put a wrapper of ``torch.distributed.<name>`` (and ``distributed_c10d.<name>``) in its
    place, once: the decorated ``fn(torch's function, the call's bound arguments)`` runs it."""
    def install(fn):
        original = getattr(dist.distributed_c10d, name)
        if getattr(original, "_hvdlite_wrapped", False):
            return fn
        signature = inspect.signature(original)

        @functools.wraps(original)
        def wrapper(*args, **kwargs):
            try:
                call = signature.bind(*args, **kwargs)
            except TypeError:
                return original(*args, **kwargs)   # torch says what is wrong with the call
            return fn(original, call)
        wrapper._hvdlite_wrapped = True
        setattr(dist.distributed_c10d, name, wrapper)
        setattr(dist, name, wrapper)
        return fn
    return install


@_wrap_torch("init_process_group")
def _init_process_group(torch_init, call):
    """Note [start-up without init_method] (src/hvdlite/c10d/startup.py)."""
    if startup.needs_hvdlite_rendezvous(call.arguments):
        call.arguments["init_method"] = startup.rendezvous_url()
    return torch_init(*call.args, **call.kwargs)


# Note [new_group of another backend]
# c10d's new_group hands the whole call to the default group's ``new_group`` method where it
# has one, without its ``backend`` argument, so dist.new_group(backend="gloo") under an
# hvdlite default group would return an hvdlite group registered as gloo. dist.new_group is
# wrapped: while it creates a group of another backend, the hook is hidden (hasattr() is
# false) and c10d builds that backend's group itself.

_other_backend_group = threading.local()


@_wrap_torch("new_group")
def _new_group_of_any_backend(torch_new_group, call):
    backend = call.arguments.get("backend")
    if backend is None or startup.hvdlite_on_cpu(backend):
        return torch_new_group(*call.args, **call.kwargs)
    _other_backend_group.active = True
    try:
        return torch_new_group(*call.args, **call.kwargs)
    finally:
        _other_backend_group.active = False


def _register():
    if BACKEND.upper() not in getattr(dist.Backend, "_plugins", {}):
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu"])
    try:
        dist.register_rendezvous_handler("hvdlite", _rendezvous)
    except RuntimeError:  # registered already (the module was reloaded)
        pass


_register()
