"""A c10d Work over hvdlite's (a collective, a fused group of them, a point-to-point transfer,
or every Work of a coalescing block), and the threads that complete its future. The adapter
mixes :class:`CallWork` into its Work class and names its future and timeout error types.

``wait()`` waits for the engine (the GIL released) and raises its error, naming the call;
``get_future()`` completes with the outputs once the engine is done, whoever waits.

Note [futures on demand]
A future needs a thread to complete it when nobody calls wait(): a completer (for a collective,
hvdlite's completion thread, which watches rather than waits: Note [watched handles] in
csrc/engine/handle.h). A Work that goes through it costs the waiter a second thread handoff
(engine -> completer -> waiter, where wait() alone is engine -> waiter). Most callers never ask for the future (FSDP2's
all-gathers, dist.* with async_op=True then wait()): a Work goes to a completer only once
get_future() is called. A Work that is dropped unwaited is finished by hvdlite's orphan
reaping, its copy-back step (non-contiguous tensors) not run, as with no future.
"""

import concurrent.futures
import copy
import queue
import threading
import time

from hvdlite import _core
from hvdlite.exceptions import HvdliteTimeoutError

from .calls import named_error, seconds, timed_out


class Completer:
    """One thread, started by the first Work, that settles Works in the order they came: the
    order a group's collectives finish in (a later group's can be held back behind them)."""

    def __init__(self, thread_name):
        self._queue = queue.SimpleQueue()
        self._thread_name, self._thread, self._lock = thread_name, None, threading.Lock()

    def submit(self, work):
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self.run, name=self._thread_name,
                                                daemon=True)
                self._thread.start()
        self._queue.put(work)

    def run(self):
        _core.mark_hvdlite_thread()  # its waits are not the rank computing
        while True:
            self._queue.get().settle()


class PollingCompleter(Completer):
    """One thread that completes Works in whatever order they finish: it polls every Work in
    flight, sleeping a little longer each idle pass (up to a millisecond), and sleeps on its
    queue while none is."""

    def run(self):
        # its polling is not the rank computing (Note [computing ranks] in
        # csrc/engine/rank_computing.h)
        _core.mark_hvdlite_thread()
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


class WatchingCompleter:
    """Completes a Work on hvdlite's completion thread once its requests finish
    (src/hvdlite/completions.py): woken once per finished request and never per submission, in
    the order requests finish, so one group's future is not held back behind another's."""

    def submit(self, work):
        work._pending.when_done(work.settle)


WATCHING = WatchingCompleter()
ORDERED = Completer("hvdlite-c10d-completer")
# a receive may wait for a message that a later collective's future is needed to send
POLLING = PollingCompleter("hvdlite-c10d-p2p")


class CallWork:
    """One c10d call's Work. ``pending``: an hvdlite Work (``wait(seconds=None)``, ``poll()``),
    None for a call finished already; ``value``: the outputs; ``what``: the call, for errors;
    ``timeout``: what ``wait()`` gives it by default (the group's, Note [group timeouts])."""

    future_type = concurrent.futures.Future   # the adapter's: set_result / set_exception
    timeout_error = HvdliteTimeoutError       # the adapter's subclass
    completer = WATCHING

    def __init__(self, pending, value, what, timeout=None):
        self._pending, self._value, self._what, self._timeout = pending, value, what, timeout
        self._future = None          # made when asked for: most blocking calls never are
        self._lock = threading.Lock()
        self._done, self._error = pending is None, None   # no future yet to complete

    def settle(self):
        """Wait for the engine, then complete (once, whichever thread is first)."""
        if not self._done:
            try:
                self._pending.wait()
                error = None
            except Exception as e:  # noqa: BLE001 - the future and wait() carry it
                error = named_error(e, self._what)
            self.complete(error)

    def complete(self, error):
        with self._lock:
            if self._done:
                return
            self._done, self._error, future = True, error, self._future
        if future is not None:
            self._fulfil(future)

    def _fulfil(self, future):
        if self._error is None:
            future.set_result(self._value)
        else:
            future.set_exception(self._error)

    def wait(self, timeout=None):
        limit = seconds(timeout) or self._timeout
        if limit is not None and not self._done:
            try:
                self.wait_within(limit)
            except HvdliteTimeoutError:
                raise timed_out(self.timeout_error, self._what, limit) from None
            except Exception:  # noqa: BLE001 - settle() takes the error below
                pass
        self.settle()
        if self._error is not None:
            raise copy.copy(self._error)
        return True

    def wait_within(self, limit):
        """HvdliteTimeoutError past ``limit`` seconds, the request still in flight."""
        self._pending.wait(limit)

    def get_future(self):
        with self._lock:
            if self._future is not None:
                return self._future
            future = self._future = self.future_type()
            done = self._done     # else complete() fulfils it
        if done:
            self._fulfil(future)
        else:
            self.completer.submit(self)
        return future

    def is_completed(self):
        if not self._done and self._pending.poll():
            self.settle()    # finished: its error (if any) and copy-back are taken now
        return self._done

    def is_success(self):
        return self.is_completed() and self._error is None

    def exception(self):
        self.is_completed()
        return self._error

    def result(self):
        self.wait()
        return self._value

    def __repr__(self):
        return f"<HvdliteWork {self._what}: {'done' if self._done else 'pending'}>"


class PeerCallWork(CallWork):
    """A send or recv (an hvdlite.p2p.PeerWork); ``_source_rank()`` (c10d's name): the
    sender's rank in the group, as gloo's recv Work gives it."""

    completer = POLLING

    def _source_rank(self):
        self.wait()
        return self._pending.source


class CoalescedWork(CallWork):
    """A coalescing block: done when every Work issued in it is; its value is theirs in
    order, its error the first of theirs (each names its call)."""

    completer = ORDERED   # its pending is itself: settled by waiting for each of its Works

    def __init__(self, works, timeout=None):
        self._works = works
        super().__init__(self, [v for w in works for v in (w._value or [])], "coalesced", timeout)
        if any(isinstance(w, PeerCallWork) for w in works):
            self.completer = POLLING   # batch_isend_irecv: polled, as its transfers are

    def poll(self):
        return all(w.is_completed() for w in self._works)

    def wait_within(self, limit):
        deadline = time.monotonic() + limit
        for w in self._works:
            if not w._done:
                w.wait_within(max(deadline - time.monotonic(), 1e-6))

    def settle(self):
        if not self._done:
            for w in self._works:
                w.settle()
            self.complete(next((w._error for w in self._works if w._error is not None), None))
