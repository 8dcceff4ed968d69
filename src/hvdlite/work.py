"""``Work``: one in-flight collective, or one group of them, as every adapter returns it.

A Work holds the core's handle(s), references to every array the core reads or writes
until they complete, and the step that turns the core's results into what the caller
gets (a tensor, a list, a tuple). ``wait()`` waits for EVERY member, even after one has
failed, so a failed group never leaves arrays or core handles behind; then it releases
them and raises the first error.

Horovod's API hands out int handles: ``int(work)`` registers the Work under a number that
``Work.lookup`` (and so ``synchronize(handle)`` / ``poll(handle)``) accepts. A Work that
is dropped without being waited for is finished in the background: its arrays stay
referenced until the core is done with them, then everything is freed.

A wait can be interrupted (Note [interruptible waits] in csrc/bindings.cc): an exception
from a Python signal handler (KeyboardInterrupt, a test's timeout), or ``wait(timeout=...)``'s
:class:`~hvdlite.exceptions.HvdliteTimeoutError`, leaves ``wait()`` while the requests stay
in flight; the members already finished are kept, and ``wait()`` may be called again.
"""

import copy
import itertools
import threading
import time
import traceback
from typing import Any, Callable, List, NamedTuple, Optional, Sequence

from . import _core, completions
from .exceptions import HvdliteError, HvdliteInvalidArgumentError, HvdliteTimeoutError


class Result(NamedTuple):
    """What the core reports for one request. Fields that do not apply to the op are None."""
    output: Any                           # core-allocated numpy array (allgather, alltoall, reducescatter),
                                          # or a CUDA DLPack array (_core.DeviceOutput) where the
                                          # request asked for device_output and NCCL carried it
    bfloat16: bool                        # output holds bfloat16 bits in a uint16 array
    received_splits: Optional[List[int]]  # alltoall: rows received from each rank
    last_joined_rank: Optional[int]       # join: the rank that joined last

    def array(self):
        """The output as numpy, bfloat16 viewed as ml_dtypes.bfloat16 when available."""
        if self.bfloat16:
            try:
                import ml_dtypes
                return self.output.view(ml_dtypes.bfloat16)
            except ImportError:
                pass  # stays as uint16 bits
        return self.output


_ids = itertools.count(1)
_by_id = {}        # int handle -> Work, for Horovod's int handles (only once int() was asked)
_orphans = []      # Works dropped before completion: finished on a later call
_lock = threading.Lock()


class Work:
    """An in-flight collective or group of collectives (see the module docstring)."""

    __slots__ = ("_handles", "_refs", "_finish", "_id", "_lock", "_done", "_value",
                 "_error", "_taken", "_stream", "_results", "__weakref__")

    def __init__(self, handles: Sequence[int], refs: Any = None,
                 finish: Optional[Callable[[List[Result]], Any]] = None, stream=None):
        # stream: for CUDA tensors, the stream that consumes the results (an int, or a
        # callable giving the current one when wait() runs, as c10d's Work.wait() does).
        self._stream = stream
        self._handles = list(handles)
        self._refs = refs
        self._finish = finish
        self._id = None
        self._lock = threading.Lock()
        self._done = False
        self._value = None
        self._error = None
        self._taken = False
        self._results = []  # members finished so far, in order (an interrupted wait keeps them)
        reap_orphans()

    # -- Horovod's int handles ----------------------------------------------------------

    def __int__(self) -> int:
        with _lock:
            if self._id is None:
                self._id = next(_ids)
                if not self._done:
                    _by_id[self._id] = self
            return self._id

    __index__ = __int__

    @staticmethod
    def lookup(handle, what: str = "synchronize") -> "Work":
        """The Work behind ``handle`` (a Work, or an int from ``int(work)``)."""
        if isinstance(handle, Work):
            return handle
        with _lock:
            work = _by_id.get(handle) if isinstance(handle, int) else None
        if work is None:
            raise HvdliteInvalidArgumentError(
                f"{what}: unknown handle {handle!r} (already synchronized, or not returned by "
                f"an hvdlite *_async function)")
        return work

    # -- completion -----------------------------------------------------------------------

    def poll(self) -> bool:
        """True once every member has finished (successfully or not); wait() won't block."""
        with self._lock:
            return self._done or all(_core.poll(h) for h in self._handles)

    def wait(self, timeout: Optional[float] = None):
        """Block until every member finishes; return the finished value or raise the first
        error. Everything the Work held is released either way.

        ``timeout`` (seconds, as c10d's ``Work.wait``): past it, raise
        :class:`~hvdlite.exceptions.HvdliteTimeoutError` with the requests still in flight
        (wait again later). A Python signal handler's exception leaves the same way."""
        if timeout is not None:
            timeout = float(timeout)
            if not timeout >= 0:
                raise HvdliteInvalidArgumentError(
                    f"wait: timeout must be a non-negative number of seconds, not {timeout!r}")
        with self._lock:
            if not self._done:
                self._complete(timeout)
        if self._error is not None:
            raise _fresh(self._error)  # Note [no cycles through a failed Work]
        return self._value

    def when_done(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once every member has finished (successfully or not), on
        hvdlite's completion thread, without anyone waiting (src/hvdlite/completions.py); a
        ``wait()`` there returns at once. At once, here, when the Work is done already."""
        # No lock: a wait() in progress holds it until the requests finish. A member that
        # wait() took meanwhile counts as finished.
        completions.when_done([] if self._done else list(self._handles), callback)

    def synchronize(self, what: str = "synchronize"):
        """Horovod's synchronize: wait() once; the handle is used up afterwards (its value
        is no longer held here)."""
        with self._lock:
            if self._taken:
                raise HvdliteInvalidArgumentError(
                    f"{what}: unknown handle {self!r} (already synchronized)")
            self._taken = True
        try:
            return self.wait()
        finally:
            self._value = self._error = None

    def __call__(self):
        """Horovod's sparse_allreduce_async hands out a function to call for the result."""
        return self.synchronize()

    # Note [no cycles through a failed Work]
    # A raised exception's traceback holds every frame it passed through; each frame holds its
    # locals and (once it has returned) its caller's frame. If the Work kept an exception that
    # had been raised, any of those frames holding the Work (self, a list of Works) would close
    # a Work -> error -> traceback -> frame -> Work cycle, and the failed group's inputs and
    # outputs would stay alive until Python's cycle collector ran: tens of MiB per failure.
    # So the Work keeps its error without a traceback, and wait() raises a fresh copy.

    def _complete(self, timeout=None):
        stream = self._stream() if callable(self._stream) else self._stream
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._handles:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            # A timeout or a signal handler's exception leaves here, the member in flight.
            self._results.append(_wait_member(self._handles[0], left, stream))
            self._handles.pop(0)
        results = [r for r, _ in self._results]
        error = next((e for _, e in self._results if e is not None), None)
        self._results, self._refs, self._done = [], None, True
        with _lock:
            _by_id.pop(self._id, None)
        if error is None and self._finish is not None:
            self._value, error = _finish_results(self._finish, results)
        elif error is None:
            self._value = results
        self._finish = None
        self._error = error

    def __del__(self):
        # Dropped unfinished: the core may still write into the arrays, so keep them until
        # it is done (reaped on a later Work's creation).
        try:
            if self._handles and not self._done:
                with _lock:
                    _orphans.append((self._handles, self._refs))
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __repr__(self):
        state = "done" if self._done else f"{len(self._handles)} pending"
        return f"<hvdlite Work {state}>"


def reap_orphans():
    """Finish the dropped Works the core is done with. Every new collective calls this
    (a Work's creation, or a synchronous all-reduce that makes none)."""
    if _orphans:
        _reap_orphans()


def _reap_orphans():
    with _lock:
        pending = list(_orphans)
        _orphans.clear()
    keep = []
    for handles, refs in pending:
        if all(_core.poll(h) for h in handles):
            for h in handles:
                try:
                    _core.wait(h)
                except Exception:  # noqa: BLE001 - nobody is left to tell
                    pass
        else:
            keep.append((handles, refs))
    if keep:
        with _lock:
            _orphans.extend(keep)


def adopt(handles, refs) -> None:
    """Requests whose synchronous call was interrupted (csrc/bindings.cc run_entries): kept
    with their arrays, as a dropped Work's are, until the core is done with them."""
    with _lock:
        _orphans.append((list(handles), refs))


def _wait_member(handle, timeout, stream=None):
    """(Result, None) or (None, the request's error). Raises HvdliteTimeoutError, or a signal
    handler's exception, with the request still in flight. CUDA results: ``stream`` waits
    for them on the device; with None the host waits."""
    try:
        output, is_bf16, splits, last = _core.wait(
            handle, None if stream is None else int(stream), timeout)
        return Result(output, bool(is_bf16), splits, last), None
    except HvdliteTimeoutError:
        raise
    except HvdliteError as e:  # reported once the rest are waited for
        # the core's own frames say nothing; see Note [no cycles through a failed Work]
        return None, e.with_traceback(None)


def _finish_results(finish, results):
    """(value, None), or (None, the error finish raised, its traceback kept as a note)."""
    try:
        return finish(results), None
    except Exception as e:  # noqa: BLE001 - raised by wait()
        e.add_note("raised in the Work's finish step:\n"
                   + "".join(traceback.format_tb(e.__traceback__)).rstrip())
        return None, e.with_traceback(None)


def _fresh(error: BaseException) -> BaseException:
    """A copy of ``error`` to raise, so that the one the Work keeps never gets a traceback."""
    try:
        return copy.copy(error)
    except Exception:  # noqa: BLE001 - a type that cannot be rebuilt from its args
        return error


def forget_all() -> None:
    """init()/shutdown(): int handles and orphans of the previous job mean nothing now."""
    with _lock:
        _by_id.clear()
        _orphans.clear()


def wait_all(works: Sequence["Work"]) -> list:
    """Wait for every Work (none is left pending), then raise the first error, if any."""
    values, error = [], None
    for w in works:
        try:
            values.append(w.wait())
        except Exception as e:  # noqa: BLE001 - re-raised after the rest are waited for
            values.append(None)
            error = error or e
    if error is not None:
        raise error
    return values
