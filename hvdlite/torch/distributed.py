"""``torch.distributed`` backend ``"hvdlite"``: c10d collectives on hvdlite's engine.

Importing this module registers the backend (CPU tensors) and the ``hvdlite://``
rendezvous. Under ``hvdlite-run`` or ``mpirun``::

    import torch.distributed as dist
    import hvdlite.torch.distributed  # noqa: F401  registers "hvdlite"
    dist.init_process_group("hvdlite", init_method="hvdlite://")

starts hvdlite's engine (or joins the one ``hvdlite.init()`` started) and takes rank and
world size from it; ``hvdlite://`` also gives torch a real key-value store (a TCPStore on
rank 0 whose address travels through the engine). ``dist.init_process_group("hvdlite")``
with no init_method does the same where torchrun's ``MASTER_ADDR`` / ``MASTER_PORT`` are
not set (Note [start-up without init_method]); with torchrun-style variables set (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) torch's ``env://`` is used, as long as
the processes were started by MPI (the engine runs over MPI).

The process group is a Python subclass of ``torch.distributed.ProcessGroup`` (c10d's
``PyProcessGroup``): DDP's reducer and ``torch.distributed``'s functions call it; it hands
the tensors' memory to hvdlite's core through DLPack, as ``hvdlite.torch`` does, and
returns a :class:`HvdliteWork` whose future completes when the engine finishes.

Note [c10d names]
A c10d collective has no name, while hvdlite's engine matches requests across ranks by
name. Every rank issues a group's collectives in the same order (c10d requires it, as gloo
does), so the n-th collective of group ``g`` is named ``c10d.g.n`` (its members
``c10d.g.n.i``). Ranks that disagree on the n-th call (shape, dtype, op, root) get the
engine's mismatch error for that name, and the error says which c10d call it was.

``new_group(ranks)`` becomes an hvdlite process set: every rank of the job calls
``new_group`` (c10d's default), and this backend's ``new_group`` hook adds the set on all
of them, so the engine needs dynamic process sets (``init_process_group`` asks for them
when it starts the engine; a job started by ``hvdlite.init()`` needs
``HVDLITE_DYNAMIC_PROCESS_SETS=1``).

``send``/``recv``/``isend``/``irecv`` (with tags, from any source) and ``batch_isend_irecv``
run on the group's point-to-point channel in the core (hvdlite/p2p.py), beside the engine:
they are not collective, so nothing about them is negotiated or named.
"""

import copy
import datetime
import functools
import inspect
import math
import os
import queue
import socket
import sys
import threading
import time

import numpy as np
import torch
import torch.distributed as dist

import hvdlite
from hvdlite import ops as _ops
from hvdlite import p2p as _p2p
from hvdlite.exceptions import (HvdliteError, HvdliteInvalidArgumentError,
                                HvdliteTimeoutError, HvdliteUnsupportedError)
from hvdlite.process_sets import ProcessSet, add_process_set

BACKEND = "hvdlite"

_REDUCE_OPS = {
    dist.ReduceOp.SUM: _ops.Sum,
    dist.ReduceOp.AVG: _ops.Average,
    dist.ReduceOp.MIN: _ops.Min,
    dist.ReduceOp.MAX: _ops.Max,
    dist.ReduceOp.PRODUCT: _ops.Product,
}

# dtypes the core moves; other tensors travel as bytes where no arithmetic is done
_CORE_DTYPES = {torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
                torch.bfloat16, torch.float32, torch.float64, torch.bool}
if hasattr(torch, "uint16"):
    _CORE_DTYPES.add(torch.uint16)


# ---------------------------------------------------------------------------------------
# Work: an hvdlite Work seen as a c10d Work with a future

class _Completer:
    """One thread that waits for in-flight collectives and completes their futures, so that
    a future (DDP's buckets, ``then`` chains) completes without anyone calling ``wait()``.
    It waits in the order the futures were asked for, which is the order a group's
    collectives finish in; a later group's future can only be held back behind an earlier one.

    Only a Work whose future was asked for comes here (Note [futures on demand])."""

    def __init__(self, thread_name="hvdlite-c10d-completer"):
        self._queue = queue.SimpleQueue()
        self._thread = None
        self._thread_name = thread_name
        self._lock = threading.Lock()

    def submit(self, work):
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=self._thread_name,
                                                    daemon=True)
                    self._thread.start()
        self._queue.put(work)

    def _run(self):
        while True:
            self._queue.get()._settle()


_completer = _Completer()


# Note [futures on demand]
# A future needs a thread to complete it when nobody calls wait(): the completer. A Work that
# goes through it costs the waiter a second thread handoff (engine -> completer -> waiter,
# where wait() alone is engine -> waiter), and the completer holds the hvdlite Work's lock
# while it waits, so a wait() behind it gets both. Most callers never ask for the future
# (FSDP2's all-gathers, dist.* with async_op=True then wait()): a Work goes to the completer
# only once get_future() is called. A Work that is dropped unwaited is finished by hvdlite's
# orphan reaping, its copy-back step (non-contiguous tensors) not run, as with no future.

class HvdliteWork(dist._Work):
    """A c10d Work over one hvdlite Work (a collective, or a fused group of them).

    ``wait()`` waits for the engine (the GIL released) and raises its error;
    ``get_future()`` completes with ``result()`` (the output tensors) once the engine is
    done, whoever waits (Note [futures on demand]). A Work made for a finished call is
    complete at once.
    """

    def __init__(self, pending, value, what, timeout=None):
        super().__init__()
        self._pending = pending      # hvdlite Work, or None when the call finished already
        self._value = value          # the output tensors: result() and the future's value
        self._what = what            # the c10d call, for errors
        self._timeout = timeout      # seconds wait() gives it by default (the group's timeout)
        self._future = None          # made when asked for: most blocking calls never are
        self._lock = threading.Lock()
        self._done = False
        self._error = None
        if pending is None:
            self._complete(None)

    def _settle(self):
        """Wait for the engine, then complete the future (once, whichever thread is first)."""
        if self._done:
            return
        try:
            self._pending.wait()
            error = None
        except Exception as e:  # noqa: BLE001 - the future and wait() carry it
            error = _named_error(e, self._what)
        self._complete(error)

    def _complete(self, error):
        with self._lock:
            if self._done:
                return
            self._done, self._error = True, error
            future = self._future
        if future is not None:
            self._fulfil(future)

    def _fulfil(self, future):
        if self._error is None:
            future.set_result(self._value)
        else:
            future.set_exception(self._error)

    def wait(self, timeout=None):
        limit = _seconds(timeout) if timeout is not None and _seconds(timeout) > 0 else self._timeout
        if limit is not None and not self._done:
            try:
                self._wait_within(limit)
            except HvdliteTimeoutError:
                raise _timed_out(self._what, limit) from None
            except Exception:  # noqa: BLE001 - _settle() takes the error below
                pass
        self._settle()
        if self._error is not None:
            raise copy.copy(self._error)
        return True

    def _wait_within(self, seconds):
        """Wait for the engine up to ``seconds``; HvdliteTimeoutError past them (the request
        stays in flight)."""
        self._pending.wait(seconds)

    def get_future(self):
        with self._lock:
            if self._future is not None:
                return self._future
            future = self._future = torch.futures.Future()
            done = self._done     # else _complete fulfils it
        if done:
            self._fulfil(future)
        else:
            self._completes_future().submit(self)
        return future

    def _completes_future(self):
        """The thread that completes this Work's future when nobody waits."""
        return _completer

    def is_completed(self):
        if not self._done and self._pending.poll():
            self._settle()    # finished: its error (if any) and copy-back are taken now
        return self._done

    def is_success(self):
        return self.is_completed() and self._error is None

    def exception(self):
        self.is_completed()
        return self._error

    def result(self):
        self.wait()
        return self._value

    def synchronize(self):
        pass  # CPU only: nothing is pending on a stream

    def __repr__(self):
        return f"<HvdliteWork {self._what}: {'done' if self._done else 'pending'}>"


def _seconds(timeout):
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return float(timeout)


def _limit(timeout):
    """Seconds of a c10d timeout (a group's, a call's), None where it is unset (c10d's
    kUnsetTimeout is -1 ms) or none."""
    if timeout is None:
        return None
    seconds = _seconds(timeout)
    return seconds if seconds > 0 else None


class GroupTimeoutError(HvdliteTimeoutError, dist.DistBackendError):
    """A collective of an hvdlite group outlived its timeout (the group's, as
    ``init_process_group(timeout=...)`` / ``new_group(timeout=...)`` set it, or the call's):
    an hvdlite timeout and, as c10d's backends raise them, a ``DistBackendError``."""


def _timed_out(what, seconds):
    # Note [group timeouts]
    # As gloo's, a group's timeout bounds every wait for one of its collectives (blocking
    # calls, and Work.wait() without a timeout of its own): past it the caller gets an error
    # instead of waiting forever for ranks that never submit the call. The request stays in
    # flight in the engine, and completes if they do submit it later.
    return GroupTimeoutError(
        f"{what}: Timed out waiting {round(seconds * 1000)}ms (the group's timeout) for the "
        f"other ranks to submit it; the request is still in flight and completes if they do")


def _named_error(error, what):
    """The engine's error with the c10d call named first (same type where it can be)."""
    message = f"{what}: {error}"
    try:
        named = type(error)(message)
    except Exception:  # noqa: BLE001 - a type that takes other arguments
        named = HvdliteError(message)
    return named.with_traceback(None)


def _done_work(value, what="finished call"):
    return HvdliteWork(None, value, what)


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


def _describe(t):
    return f"shape {list(t.shape)}, dtype {t.dtype}"


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


def _reducible(t, what, label):
    if t.dtype not in _CORE_DTYPES:
        raise HvdliteUnsupportedError(
            f"{what}: {label} ({_describe(t)}) has dtype {t.dtype}, which hvdlite cannot reduce "
            f"(supported: {', '.join(sorted(str(d).replace('torch.', '') for d in _CORE_DTYPES))})")


def _from_core(result):
    """The core-allocated output as a tensor (no copy)."""
    t = torch.from_numpy(result.output)
    return t.view(torch.bfloat16) if result.bfloat16 else t


def _into(dst, src):
    """Copy the flat values ``src`` (any dtype of equal bytes) into the tensor ``dst``."""
    if src.dtype != dst.dtype:     # bytes back into the tensor's dtype
        src = src.reshape(-1).view(dst.dtype)
    with torch.no_grad():
        dst.copy_(src.reshape(dst.shape))


def _reduce_op(op, what):
    key = getattr(op, "op", op)
    if key not in _REDUCE_OPS:
        raise HvdliteUnsupportedError(
            f"{what}: reduce op {key} is not supported by the hvdlite backend "
            f"(supported: SUM, AVG, MIN, MAX, PRODUCT)")
    return _REDUCE_OPS[key]


# ---------------------------------------------------------------------------------------
# the process group

class HvdliteProcessGroup(dist.ProcessGroup):
    """A c10d process group whose collectives run on hvdlite's engine (see the module
    docstring). ``process_set``: the hvdlite ProcessSet of its ranks (None: every rank)."""

    def __init__(self, rank, size, process_set, group_name, store=None, timeout=None):
        # (rank, size): c10d 2.13's trampoline cannot be built from (store, rank, size)
        super().__init__(rank, size)
        self._store = store
        self._timeout = _limit(timeout)   # Note [group timeouts]
        self._rank, self._size = rank, size
        self._set = process_set
        self._ranks = (list(range(hvdlite.size())) if process_set is None
                       else list(process_set.ranks))
        self._label = group_name
        self._group_name, self._group_desc = group_name, "undefined"
        self._seq = 0
        self._seq_lock = threading.Lock()
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

    # -- Note [c10d names] --------------------------------------------------------------

    def _next(self, kind):
        with self._seq_lock:
            seq = self._seq
            self._seq += 1
        return f"c10d.{self._label}.{seq}", f"{kind} (call {seq} of group {self._label!r})"

    @staticmethod
    def _members(name, n):
        return [name] if n == 1 else [f"{name}.{i}" for i in range(n)]

    def _global(self, group_rank, what):
        if not 0 <= group_rank < self._size:
            raise HvdliteInvalidArgumentError(
                f"{what}: root rank {group_rank} is out of range for a group of {self._size}")
        return self._ranks[group_rank]

    def _issue(self, start, value, what, async_op, finish=None, timeout=None):
        """Run ``start()`` (an hvdlite Work); wait here unless the call is asynchronous.
        ``timeout``: the call's own (c10d options), else the group's (Note [group timeouts])."""
        limit = _limit(timeout) or self._timeout
        try:
            pending = start()
        except Exception as e:  # noqa: BLE001 - raised with the c10d call named
            raise _named_error(e, what) from None
        if async_op:
            work = HvdliteWork(pending, value, what, limit)
        else:
            try:
                pending.wait(limit)
            except HvdliteTimeoutError:
                raise _timed_out(what, limit) from None
            except Exception as e:  # noqa: BLE001
                raise _named_error(e, what) from None
            work = _done_work(value, what)
        if self._coalesced is not None:
            self._coalesced.append(work)
        return work

    # -- all-reduce ---------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        opts = opts or dist.AllreduceOptions()
        if any(isinstance(t, torch.Tensor) and t.layout == torch.sparse_coo for t in tensors):
            return self._sparse_allreduce(list(tensors), opts.reduceOp, opts.asyncOp)
        return self._allreduce(list(tensors), opts.reduceOp, opts.asyncOp, "allreduce")

    def _sparse_allreduce(self, tensors, reduce_op, async_op):
        """A sparse COO tensor (e.g. the gradient of ``nn.Embedding(sparse=True)`` under DDP),
        summed as gloo sums it: every rank's indices and values are all-gathered (ranks may
        hold different numbers of them), their sum is coalesced, and it replaces the tensor's
        contents in place."""
        name, what = self._next("allreduce_sparse")
        if len(tensors) != 1 or tensors[0].layout != torch.sparse_coo:
            raise HvdliteInvalidArgumentError(
                f"{what}: a sparse all-reduce takes one sparse COO tensor; got "
                f"{[getattr(t, 'layout', type(t).__name__) for t in tensors]}")
        if getattr(reduce_op, "op", reduce_op) != dist.ReduceOp.SUM:
            raise HvdliteUnsupportedError(
                f"{what}: sparse tensors are reduced with SUM only (as gloo); got "
                f"{getattr(reduce_op, 'op', reduce_op)}")
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
            [indices, values], self._members(name, 2), process_set=self._set, finish=finish),
            tensors, what, async_op)

    def allreduce_coalesced(self, tensors, opts=None):
        opts = opts or dist.AllreduceCoalescedOptions()
        return self._allreduce(list(tensors), opts.reduceOp, opts.asyncOp, "allreduce_coalesced")

    def _allreduce(self, tensors, reduce_op, async_op, kind, outputs=None):
        name, what = self._next(kind)
        op = _reduce_op(reduce_op, what)
        bufs, outs, back = [], [], []
        for i, t in enumerate(tensors):
            _check_tensor(t, what, f"tensor {i}")
            _reducible(t, what, f"tensor {i}")
            buf, copied = _contiguous(t)
            bufs.append(buf)
            if outputs is not None:       # reduce() on a non-root: leave the input alone
                outs.append(outputs[i])
            else:
                outs.append(buf)
            back.append(copied and outputs is None)
        names = self._members(name, len(tensors))

        def finish(_results):
            for t, out, copy_back in zip(tensors, outs, back):
                if copy_back:
                    _into(t, out)
            return tensors

        if not async_op and not any(back):
            # Blocking: the calling thread runs the engine's rounds (no thread handoff).
            try:
                if len(bufs) == 1:
                    _ops.allreduce(bufs[0], outs[0], names[0], op, process_set=self._set)
                else:
                    _ops.grouped_allreduce(bufs, outs, names, op, process_set=self._set)
            except Exception as e:  # noqa: BLE001
                raise _named_error(e, what) from None
            return _done_work(tensors, what)
        return self._issue(lambda: _ops.grouped_allreduce_async(
            bufs, outs, names, op, process_set=self._set, finish=finish, wake=True),
            tensors, what, async_op)

    def reduce(self, tensors, opts=None):
        opts = opts or dist.ReduceOptions()
        tensors = list(tensors)
        root = self._global(opts.rootRank, "reduce")
        if self._ranks[self._rank] == root:
            return self._allreduce(tensors, opts.reduceOp, opts.asyncOp, "reduce")
        scratch = [torch.empty(t.shape, dtype=t.dtype) for t in tensors]
        return self._allreduce(tensors, opts.reduceOp, opts.asyncOp, "reduce", outputs=scratch)

    # -- broadcast ----------------------------------------------------------------------

    def broadcast(self, tensors, opts=None):
        opts = opts or dist.BroadcastOptions()
        tensors = list(tensors)
        name, what = self._next("broadcast")
        root = self._global(opts.rootRank, what)
        if opts.rootTensor != 0:
            raise HvdliteUnsupportedError(f"{what}: rootTensor={opts.rootTensor} (only 0)")
        bufs, back = [], []
        for i, t in enumerate(tensors):
            _check_tensor(t, what, f"tensor {i}")
            buf, copied = _contiguous(t)
            bufs.append(buf)
            back.append(copied)
        wires = [_wire(b) for b in bufs]

        def finish(_results):
            for t, buf, copy_back in zip(tensors, bufs, back):
                if copy_back:
                    _into(t, buf)
            return tensors

        return self._issue(lambda: _ops.grouped_broadcast_async(
            wires, root, None, self._members(name, len(tensors)), process_set=self._set,
            finish=finish), tensors, what, opts.asyncOp)

    def _check_per_rank(self, what, tensors, label, like, like_label,
                        mismatch=HvdliteInvalidArgumentError, why=""):
        """``tensors``: one tensor per group rank, each with ``like``'s size and dtype."""
        if len(tensors) != self._size:
            raise HvdliteInvalidArgumentError(
                f"{what}: {label} is a list of {len(tensors)} tensors for a group of "
                f"{self._size} ranks")
        for r, x in enumerate(tensors):
            _check_tensor(x, what, f"{label}[{r}]")
            if x.numel() != like.numel() or x.dtype != like.dtype:
                raise mismatch(f"{what}: {label}[{r}] ({_describe(x)}) does not match "
                               f"{like_label} ({_describe(like)}){why}")

    # -- all-gather ---------------------------------------------------------------------

    def _gather_into(self, kind, pairs, async_op, value):
        """All-gather each input flat (one row per rank) and copy the rows into the outputs.

        ``pairs``: (input, [output per group rank] or None on a rank that keeps nothing).
        """
        name, what = self._next(kind)
        rows = []
        for i, (t, outs) in enumerate(pairs):
            _check_tensor(t, what, f"input {i}")
            if outs is not None:
                self._check_per_rank(what, outs, f"output {i}", t, f"input {i}")
            rows.append(_wire(_contiguous(t)[0].reshape(1, -1)))

        def finish(results):
            for (t, outs), r in zip(pairs, results):
                if outs is None:
                    continue
                gathered = _from_core(r)
                for k, o in enumerate(outs):
                    _into(o, gathered[k])
            return value

        return self._issue(lambda: _ops.grouped_allgather_async(
            rows, self._members(name, len(rows)), process_set=self._set, finish=finish),
            value, what, async_op)

    def allgather(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.AllgatherOptions()
        return self._gather_into("allgather", list(zip(input_tensors, output_tensors)),
                                 opts.asyncOp, output_tensors)

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        # c10d's layout: output_lists[rank][i] receives input i of that rank.
        opts = opts or dist.AllgatherOptions()
        if len(output_lists) != self._size or any(len(o) != len(input_tensors) for o in output_lists):
            raise HvdliteInvalidArgumentError(
                f"allgather_coalesced: needs {self._size} output lists (one per rank) of "
                f"{len(input_tensors)} tensors (one per input); got "
                f"{[len(o) for o in output_lists]}")
        pairs = [(t, [output_lists[r][i] for r in range(self._size)])
                 for i, t in enumerate(input_tensors)]
        return self._gather_into("allgather_coalesced", pairs, opts.asyncOp, output_lists)

    def all_gather_single(self, output, input, opts=None):
        return self.all_gather_single_coalesced([output], [input], opts, "all_gather_single")

    def all_gather_single_coalesced(self, outputs, inputs, opts=None,
                                    kind="all_gather_single_coalesced"):
        opts = opts or dist.AllgatherOptions()
        pairs = []
        for o, t in zip(outputs, inputs):
            if o.numel() != t.numel() * self._size:
                raise HvdliteInvalidArgumentError(
                    f"{kind}: the output ({_describe(o)}) must hold {self._size} times the "
                    f"input ({_describe(t)})")
            pairs.append((t, list(o.view(self._size, -1)) if o.is_contiguous() else None))
            if pairs[-1][1] is None:
                raise HvdliteInvalidArgumentError(f"{kind}: the output tensor must be contiguous")
        return self._gather_into(kind, pairs, opts.asyncOp, outputs)

    _allgather_base = all_gather_single
    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def gather(self, output_lists, input_tensors, opts=None):
        opts = opts or dist.GatherOptions()
        root = self._global(opts.rootRank, "gather")
        mine = self._ranks[self._rank] == root
        if mine and len(output_lists) != len(input_tensors):
            raise HvdliteInvalidArgumentError(
                f"gather: the root needs one output list per input; got {len(output_lists)}")
        pairs = [(t, output_lists[i] if mine else None) for i, t in enumerate(input_tensors)]
        return self._gather_into("gather", pairs, opts.asyncOp, output_lists)

    # -- reduce-scatter -----------------------------------------------------------------

    def _scatter_reduced(self, kind, pairs, reduce_op, async_op, value):
        """Reduce ``size`` equal blocks per input across ranks; block r goes to rank r.

        ``pairs``: (output, [block per group rank]) or (output, one tensor of size blocks).
        """
        name, what = self._next(kind)
        op = _reduce_op(reduce_op, what)
        stacks = []
        for i, (out, blocks) in enumerate(pairs):
            _check_tensor(out, what, f"output {i}")
            _reducible(out, what, f"output {i}")
            if isinstance(blocks, torch.Tensor):
                _check_tensor(blocks, what, f"input {i}")
                if blocks.numel() != out.numel() * self._size or blocks.dtype != out.dtype:
                    raise HvdliteInvalidArgumentError(
                        f"{what}: input {i} ({_describe(blocks)}) must hold {self._size} "
                        f"blocks like output {i} ({_describe(out)})")
                flat = _contiguous(blocks)[0].reshape(self._size, -1)
            else:
                self._check_per_rank(what, blocks, f"input {i}", out, f"output {i}",
                                     HvdliteUnsupportedError, "; the hvdlite backend scatters equal blocks")
                flat = torch.stack([b.detach().reshape(-1) for b in blocks])
            stacks.append(flat)

        def finish(results):
            for (out, _), r in zip(pairs, results):
                _into(out, _from_core(r))
            return value

        return self._issue(lambda: _ops.grouped_reducescatter_async(
            stacks, self._members(name, len(stacks)), op, process_set=self._set,
            finish=finish), value, what, async_op)

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        return self._scatter_reduced("reduce_scatter", list(zip(output_tensors, input_lists)),
                                     opts.reduceOp, opts.asyncOp, output_tensors)

    def reduce_scatter_single(self, output, input, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        return self._scatter_reduced("reduce_scatter_single", [(output, input)], opts.reduceOp,
                                     opts.asyncOp, [output])

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts=None):
        opts = opts or dist.ReduceScatterOptions()
        return self._scatter_reduced("reduce_scatter_single_coalesced",
                                     list(zip(outputs, inputs)), opts.reduceOp, opts.asyncOp,
                                     outputs)

    _reduce_scatter_base = reduce_scatter_single
    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    # -- all-to-all and scatter ---------------------------------------------------------

    def _alltoall(self, what, name, send, splits, async_op, finish, value):
        return self._issue(lambda: _ops.alltoall_async(
            send, splits, name, process_set=self._set, finish=finish), value, what, async_op)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,
                          opts=None):
        opts = opts or dist.AllToAllOptions()
        name, what = self._next("all_to_all_single")
        _check_tensor(input, what, "input")
        _check_tensor(output, what, "output")
        if input.dim() == 0:
            raise HvdliteInvalidArgumentError(f"{what}: the input is a scalar; all_to_all_single "
                                              f"splits dimension 0")
        rows = _contiguous(input)[0]
        rows = _wire(rows.reshape(rows.shape[0], int(np.prod(rows.shape[1:], dtype=np.int64))))
        in_splits = list(input_split_sizes) or None
        out_splits = list(output_split_sizes)
        if in_splits is None and input.shape[0] % self._size:
            raise HvdliteInvalidArgumentError(
                f"{what}: dimension 0 of the input ({input.shape[0]}) does not divide into "
                f"{self._size} equal parts; pass input_split_sizes")

        def finish(results):
            received = list(results[0].received_splits or [])
            if out_splits and received != out_splits:
                raise HvdliteInvalidArgumentError(
                    f"{what}: received rows {received} from the ranks, but "
                    f"output_split_sizes is {out_splits}")
            _into(output, _from_core(results[0]))
            return [output]

        return self._alltoall(what, name, rows, in_splits, opts.asyncOp, finish, [output])

    alltoall_base = all_to_all_single

    def alltoall(self, output_tensors, input_tensors, opts=None):
        opts = opts or dist.AllToAllOptions()
        name, what = self._next("alltoall")
        inputs, outputs = list(input_tensors), list(output_tensors)
        for label, ts in (("input", inputs), ("output", outputs)):
            if len(ts) != self._size:
                raise HvdliteInvalidArgumentError(
                    f"{what}: {len(ts)} {label} tensors for a group of {self._size} ranks")
            for i, t in enumerate(ts):
                _check_tensor(t, what, f"{label} {i}")
        dtypes = {t.dtype for t in inputs + outputs}
        if len(dtypes) != 1:
            raise HvdliteInvalidArgumentError(
                f"{what}: the tensors mix dtypes {sorted(map(str, dtypes))}")
        flat = [_wire(t.detach().reshape(-1).reshape(-1, 1)).reshape(-1) for t in inputs]
        send = torch.cat(flat)
        splits = [f.numel() for f in flat]

        def finish(results):
            received = list(results[0].received_splits or [])
            got = _from_core(results[0]).reshape(-1)
            wanted = [_wire(o.detach().reshape(-1, 1)).numel() for o in outputs]
            if received != wanted:
                raise HvdliteInvalidArgumentError(
                    f"{what}: received {received} elements from the ranks, but the outputs "
                    f"hold {wanted}")
            offset = 0
            for o, n in zip(outputs, received):
                _into(o, got[offset:offset + n])
                offset += n
            return outputs

        return self._alltoall(what, name, send, splits, opts.asyncOp, finish, outputs)

    def scatter(self, output_tensors, input_lists, opts=None):
        """The root sends block r to rank r: an all-to-all in which only the root sends."""
        opts = opts or dist.ScatterOptions()
        name, what = self._next("scatter")
        root = self._global(opts.rootRank, what)
        if len(output_tensors) != 1:
            raise HvdliteUnsupportedError(f"{what}: {len(output_tensors)} output tensors (only 1)")
        out = output_tensors[0]
        _check_tensor(out, what, "output")
        if self._ranks[self._rank] == root:
            blocks = list(input_lists[0])
            self._check_per_rank(what, blocks, "the root's scatter list", out, "the output")
            flat = [_wire(b.detach().reshape(-1, 1)).reshape(-1) for b in blocks]
        else:
            flat = [_wire(out.new_empty((0, 1))).reshape(-1)] * self._size
        send = torch.cat(flat)
        splits = [f.numel() for f in flat]

        def finish(results):
            _into(out, _from_core(results[0]).reshape(-1))
            return output_tensors

        return self._alltoall(what, name, send, splits, opts.asyncOp, finish, output_tensors)

    # -- barrier, coalescing ------------------------------------------------------------

    def barrier(self, opts=None):
        opts = opts or dist.BarrierOptions()
        name, what = self._next("barrier")
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
        after a recv). Never negotiated (hvdlite/p2p.py): the Work completes when the message
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
        try:
            pending = start(wire, peer, tag, process_set=self._set, finish=finish)
        except Exception as e:  # noqa: BLE001 - raised with the call named
            raise _named_error(e, label) from None
        work = _PeerToPeerWork(pending, [t], label, self._timeout)
        if self._coalesced is not None:   # batch_isend_irecv: one Work for the batch
            self._coalesced.append(work)
        return work

    def send(self, tensors, dst, tag=0):
        return self._p2p("send", tensors, dst, tag)

    def recv(self, tensors, src, tag=0):
        return self._p2p("recv", tensors, src, tag)

    def recv_anysource(self, tensors, tag=0):
        return self._p2p("recv", tensors, None, tag)

    # -- groups -------------------------------------------------------------------------

    @property
    def new_group(self):
        """c10d's ``new_group`` hook, absent while ``dist.new_group`` asks for another backend
        (Note [new_group of another backend])."""
        if getattr(_other_backend_group, "active", False):
            raise AttributeError("new_group")
        return self._new_group

    def _new_group(self, ranks, timeout=None, pg_options=None, group_name=None,
                   group_desc=None):
        """c10d's ``new_group`` hook, called on every rank of the job (Note [c10d names])."""
        ranks = sorted(int(r) for r in ranks)
        if group_name and not group_name.isdigit():
            # c10d hashes the name when only the members synchronize: the others never call
            raise HvdliteUnsupportedError(
                "new_group(use_local_synchronization=True) is not supported by the hvdlite "
                "backend: its process sets are added by every rank of the job")
        process_set = _process_set_for(ranks)
        if hvdlite.rank() not in ranks:
            return None
        group = HvdliteProcessGroup(ranks.index(hvdlite.rank()), len(ranks), process_set,
                                    group_name, timeout=timeout)
        group._set_group_name(group_name)
        if group_desc:
            group._set_group_desc(group_desc)
        return group

    def shutdown(self):
        _shutdown_if_started(self)

    def abort(self):
        _shutdown_if_started(self)


class _AllOf(HvdliteWork):
    """The Work of a coalescing block: done when every Work issued in it is done."""

    def __init__(self, works, timeout=None):
        self._works = works
        self._timeout = timeout   # the group's (Note [group timeouts])
        dist._Work.__init__(self)
        self._future = None
        self._lock, self._done, self._error, self._what = threading.Lock(), False, None, "coalesced"
        self._value = [v for w in works for v in (w._value or [])]
        self._pending = self

    def poll(self):
        return all(w.is_completed() for w in self._works)

    def _wait_within(self, seconds):
        deadline = time.monotonic() + seconds
        for w in self._works:
            if not w._done:
                w._wait_within(max(deadline - time.monotonic(), 1e-6))

    def _completes_future(self):
        # batch_isend_irecv's Work: polled, as its sends and receives are
        if any(isinstance(w, _PeerToPeerWork) for w in self._works):
            return _p2p_completer
        return _completer

    def _settle(self):
        if self._done:
            return
        error = None
        for w in self._works:
            w._settle()
            error = error or w._error
        self._complete(error)


class _PollingCompleter(_Completer):
    """One thread that completes point-to-point futures in whatever order the transfers
    finish: it polls every transfer asked for, sleeping a little longer each idle pass (up to
    a millisecond), and sleeps on its queue while none is in flight."""

    def _run(self):
        works, nap = [], 1e-5
        while True:
            try:
                while True:
                    works.append(self._queue.get(block=not works))
            except queue.Empty:
                pass
            left = [w for w in works if not w.is_completed()]
            nap = 1e-5 if len(left) < len(works) else min(nap * 2, 1e-3)
            works = left
            if works:
                time.sleep(nap)


_p2p_completer = _PollingCompleter("hvdlite-c10d-p2p")


class _PeerToPeerWork(HvdliteWork):
    """The Work of a send or recv (an hvdlite.p2p.PeerWork): ``_source_rank()`` is the sender's
    rank in the group, as gloo's recv Work gives it. Its future is completed by polling
    (``_p2p_completer``), never behind the collectives' completer: a receive may wait on a
    message that a later collective's future is needed to send."""

    def _source_rank(self):
        self.wait()
        return self._pending.source

    def _completes_future(self):
        return _p2p_completer


# ---------------------------------------------------------------------------------------
# process sets for groups

_sets_by_ranks = {}


def _process_set_for(ranks):
    """The hvdlite process set of ``ranks`` (None: every rank), added once per job."""
    if ranks == list(range(hvdlite.size())):
        return None
    key = tuple(ranks)
    if key not in _sets_by_ranks:
        for set_id in hvdlite._core.process_set_ids():
            if list(hvdlite._core.process_set_ranks(set_id)) == ranks:
                existing = ProcessSet(ranks)
                existing.process_set_id = set_id
                _sets_by_ranks[key] = existing
                break
        else:
            _sets_by_ranks[key] = add_process_set(ProcessSet(ranks))
    return _sets_by_ranks[key]


# ---------------------------------------------------------------------------------------
# start-up: the creator and the hvdlite:// rendezvous

_started_engine = False   # whether this module started hvdlite's engine (and so stops it)
_default_group = None


def _start_engine():
    global _started_engine
    if not hvdlite.is_initialized():
        hvdlite.init(process_sets="dynamic")
        _started_engine = True


def _show_errors_before_abort():
    """Keep a failing rank's traceback visible.

    init_process_group wraps sys.excepthook in one that sends stderr into a buffer while
    the previous hook runs, and prints the buffer afterwards; hvdlite's hook (installed by
    hvdlite.init) ends the job with MPI_Abort inside that call, so the buffer was never
    printed. Wrapped here, before torch wraps it, hvdlite's hook writes to the real stderr.
    """
    inner = sys.excepthook
    if getattr(inner, "_hvdlite_c10d", False):
        return

    def hook(*args):
        redirected, sys.stderr = sys.stderr, sys.__stderr__
        try:
            inner(*args)
        finally:
            sys.stderr = redirected
    hook._hvdlite_c10d = True
    sys.excepthook = hook


def _shutdown_if_started(group):
    global _started_engine, _default_group
    if group is _default_group:
        _default_group = None
        _sets_by_ranks.clear()
        if _started_engine and hvdlite.is_initialized():
            hvdlite.shutdown()
        _started_engine = False


def _create(backend_opts, pg_options):
    """``register_backend``'s creator (extended API): the group's ranks and name come in."""
    global _default_group
    _start_engine()
    _show_errors_before_abort()
    ranks = sorted(backend_opts.global_ranks_in_group)
    what = f"init_process_group({BACKEND!r})"
    if not ranks:   # the default group
        if backend_opts.group_size != hvdlite.size() or backend_opts.group_rank != hvdlite.rank():
            raise HvdliteInvalidArgumentError(
                f"{what}: torch.distributed was given rank {backend_opts.group_rank} of "
                f"{backend_opts.group_size}, but hvdlite's engine runs rank {hvdlite.rank()} of "
                f"{hvdlite.size()}; launch with hvdlite-run or mpirun (one process per rank) and "
                f"use init_method='hvdlite://'")
        process_set = None
    else:
        if tuple(ranks) not in _sets_by_ranks and ranks != list(range(hvdlite.size())):
            raise HvdliteUnsupportedError(
                f"new_group(ranks={ranks}, backend={BACKEND!r}): hvdlite adds a process set on "
                f"every rank, which needs the default group on hvdlite too "
                f"(dist.init_process_group({BACKEND!r}))")
        process_set = _process_set_for(ranks)
    group = HvdliteProcessGroup(backend_opts.group_rank, backend_opts.group_size, process_set,
                                str(backend_opts.group_id), backend_opts.store,
                                timeout=backend_opts.timeout)
    if not backend_opts.global_ranks_in_group:
        _default_group = group
    return group


def _rendezvous(url, timeout=None, **kwargs):
    """``hvdlite://``: rank and world size from hvdlite's engine (started here if needed),
    and a TCPStore on rank 0 whose host and port are broadcast through the engine."""
    from urllib.parse import parse_qs, urlparse
    _start_engine()
    rank, size = hvdlite.rank(), hvdlite.size()
    query = {k: int(v[0]) for k, v in parse_qs(urlparse(url).query).items()
             if k in ("rank", "world_size")}
    for key, mine in (("rank", rank), ("world_size", size)):
        if query.get(key, -1) not in (-1, mine):
            raise HvdliteInvalidArgumentError(
                f"init_process_group(init_method='hvdlite://'): {key}={query[key]} was given "
                f"but hvdlite's engine runs {key} {mine}; leave {key} out")
    timeout = timeout or datetime.timedelta(minutes=30)
    if rank == 0:
        host = "127.0.0.1" if hvdlite.local_size() == size else socket.gethostname()
        store = dist.TCPStore(host, 0, size, True, timeout, wait_for_workers=False)
        address = f"{host}:{store.port}".encode()
    else:
        store, address = None, b""
    buf = np.zeros(256, np.uint8)
    buf[:len(address)] = np.frombuffer(address, np.uint8)
    _ops.broadcast_async(buf, 0, name="c10d.rendezvous").wait()
    if rank != 0:
        host, port = bytes(buf).rstrip(b"\0").decode().rsplit(":", 1)
        store = dist.TCPStore(host, int(port), size, False, timeout)
    yield store, rank, size
    raise RuntimeError("hvdlite:// rendezvous cannot be repeated")


def init_process_group(**kwargs):
    """``torch.distributed.init_process_group("hvdlite", init_method="hvdlite://", ...)``."""
    kwargs.setdefault("init_method", "hvdlite://")
    dist.init_process_group(BACKEND, **kwargs)


# Note [start-up without init_method]
# torch's init_process_group falls back to init_method="env://" when given neither an
# init_method nor a store, and env:// stops at once where torchrun's MASTER_ADDR / MASTER_PORT
# are missing, which is every hvdlite-run or mpirun job. c10d has no hook between choosing
# the backend and choosing the rendezvous, so torch.distributed's init_process_group is
# wrapped: for an "hvdlite" CPU backend, no init_method, no store and no MASTER_ADDR /
# MASTER_PORT, the rendezvous is hvdlite:// (rank and size from the engine). Every other call
# reaches torch's function unchanged.

def _hvdlite_on_cpu(backend):
    """Whether the backend string puts CPU tensors on hvdlite ("hvdlite", "cpu:hvdlite,...")."""
    if backend is None:
        return False
    for part in str(backend).lower().split(","):
        device, _, name = part.strip().rpartition(":")
        if name == BACKEND and device in ("", "cpu"):
            return True
    return False


def _replace_in_torch(name, make_wrapper):
    """Put ``make_wrapper(torch's function, its signature)`` in place of
    ``torch.distributed.<name>`` (and of ``distributed_c10d.<name>``), once."""
    original = getattr(dist.distributed_c10d, name)
    if getattr(original, "_hvdlite_wrapped", False):
        return
    wrapper = functools.wraps(original)(make_wrapper(original, inspect.signature(original)))
    wrapper._hvdlite_wrapped = True
    setattr(dist.distributed_c10d, name, wrapper)
    setattr(dist, name, wrapper)


def _init_process_group_wrapper(torch_init, signature):
    def init_process_group(*args, **kwargs):
        try:
            call = signature.bind(*args, **kwargs)
        except TypeError:
            return torch_init(*args, **kwargs)   # torch says what is wrong with the call
        given = call.arguments
        if (_hvdlite_on_cpu(given.get("backend")) and given.get("init_method") is None
                and given.get("store") is None
                and not ("MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ)):
            given["init_method"] = "hvdlite://"
        return torch_init(*call.args, **call.kwargs)
    return init_process_group


# Note [new_group of another backend]
# c10d's new_group hands the whole call to the default group's ``new_group`` method where it
# has one, without its ``backend`` argument, so dist.new_group(backend="gloo") under an
# hvdlite default group would return an hvdlite group registered as gloo. dist.new_group is
# wrapped: while it creates a group of another backend, the hook is hidden (hasattr() is
# false) and c10d builds that backend's group itself.

_other_backend_group = threading.local()


def _new_group_wrapper(torch_new_group, signature):
    def new_group(*args, **kwargs):
        try:
            backend = signature.bind(*args, **kwargs).arguments.get("backend")
        except TypeError:
            backend = None   # torch says what is wrong with the call
        if backend is None or _hvdlite_on_cpu(backend):
            return torch_new_group(*args, **kwargs)
        _other_backend_group.active = True
        try:
            return torch_new_group(*args, **kwargs)
        finally:
            _other_backend_group.active = False
    return new_group


def _register():
    if BACKEND.upper() not in getattr(dist.Backend, "_plugins", {}):
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu"])
    try:
        dist.register_rendezvous_handler("hvdlite", _rendezvous)
    except RuntimeError:  # registered already (the module was reloaded)
        pass
    _replace_in_torch("init_process_group", _init_process_group_wrapper)
    _replace_in_torch("new_group", _new_group_wrapper)


_register()
