"""Callbacks run when requests finish, without anyone waiting: what completes a c10d future.

One daemon thread, started on demand and ending once idle for a while, waits in the
core for whichever watched request finishes next (Note [watched handles] in
csrc/engine/handle.h): it wakes once per finished request and never when one is submitted,
and a request that finishes early is not held up behind one that finishes late. The rank
counts as blocked on watched requests, as if a thread waited on them, so the deadlock
detector still sees a deadlock between requests behind futures.

A callback runs on that thread once every handle given with it has finished; the handles'
outcomes are still in the core, so the callback's ``wait()`` returns at once. A callback
must not block on another watched request (it would hold up every later callback).
"""
import atexit
import os
import threading
import traceback
from typing import Callable, Dict, List, Sequence

from hvdlite import _core

_POLL_SECONDS = 0.2   # the thread ends after this long with nothing to watch


class _Pending:
    __slots__ = ("callback", "left")

    def __init__(self, callback: Callable[[], None], left: int):
        self.callback = callback
        self.left = left


_lock = threading.Lock()
_watched: Dict[int, _Pending] = {}   # handle -> its callback and how many of its handles are left
_thread = None


def when_done(handles: Sequence[int], callback: Callable[[], None]) -> None:
    """Run ``callback()`` on the completion thread once every one of ``handles`` finished."""
    global _thread
    handles = list(handles)
    if not handles:
        callback()
        return
    pending = _Pending(callback, len(handles))
    with _lock:
        for h in handles:
            _watched[h] = pending
        if _thread is None:
            _thread = threading.Thread(target=_run, name="hvdlite-completions", daemon=True)
            _thread.start()
    try:
        _core.watch(handles)
    except BaseException:
        with _lock:
            for h in handles:
                _watched.pop(h, None)
        raise


def _forget_after_fork():
    # A forked child (a DataLoader worker) has neither the thread nor the parent's requests.
    global _thread, _lock
    _lock = threading.Lock()
    _thread = None
    _watched.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


@atexit.register
def _end_thread():
    # A daemon thread still inside the core when Python finalizes would be torn down there,
    # through C++ frames that must not unwind (std::terminate): end it first.
    with _lock:
        thread = _thread
        _watched.clear()
    if thread is not None:
        thread.join(timeout=2 * _POLL_SECONDS + 1)


def _run():
    global _thread
    _core.mark_hvdlite_thread()  # its waits are not the rank computing (Note [computing ranks])
    while True:
        try:
            handle = _core.next_watched(_POLL_SECONDS)
        except Exception:  # noqa: BLE001 - hvdlite shut down: the callbacks' waits raise why
            handle = None
            _run_all_left()
        if handle is None:
            with _lock:   # idle for a while: end (when_done starts another)
                if not _watched:
                    _thread = None
                    return
            continue
        with _lock:
            pending = _watched.pop(handle, None)
            if pending is None:
                continue
            pending.left -= 1
            if pending.left:
                continue
        _call(pending.callback)


def _run_all_left():
    with _lock:
        left: List[_Pending] = list({id(p): p for p in _watched.values()}.values())
        _watched.clear()
    for pending in left:
        _call(pending.callback)


def _call(callback):
    try:
        callback()
    except Exception:  # noqa: BLE001 - a callback's error must not end the thread
        traceback.print_exc()
