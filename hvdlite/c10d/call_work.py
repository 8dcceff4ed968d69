"""A c10d Work over one hvdlite Work (a collective, a fused group of them, a point-to-point
transfer, or every Work of a coalescing block), without the framework: the adapter mixes
:class:`CallWork` into its own Work class and names its future and timeout error types.

``wait()`` waits for the engine (the GIL released) and raises its error, naming the call;
``get_future()`` completes with the output value once the engine is done, whoever waits
(Note [futures on demand] in completers.py). A Work made for a finished call (``pending``
None) is complete at once.
"""

import concurrent.futures
import copy
import threading
import time

from hvdlite.exceptions import HvdliteTimeoutError

from . import completers
from .calls import named_error
from .timeouts import seconds, timed_out


class CallWork:
    """One c10d call's Work (see the module docstring). ``pending``: an hvdlite Work (or
    anything with ``wait(seconds=None)`` and ``poll()``), None when the call finished already;
    ``value``: the outputs; ``what``: the call, for errors; ``timeout``: seconds ``wait()``
    gives it by default (the group's, Note [group timeouts])."""

    future_type = concurrent.futures.Future   # the adapter's: set_result / set_exception
    timeout_error = HvdliteTimeoutError       # the adapter's subclass, raised past a timeout
    completer = completers.ORDERED            # the thread that completes a future asked for

    def __init__(self, pending, value, what, timeout=None):
        self._pending = pending
        self._value = value
        self._what = what
        self._timeout = timeout
        self._future = None          # made when asked for: most blocking calls never are
        self._lock = threading.Lock()
        self._done = False
        self._error = None
        if pending is None:
            self.complete(None)

    def settle(self):
        """Wait for the engine, then complete the future (once, whichever thread is first)."""
        if self._done:
            return
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
        """Wait for the engine up to ``limit`` seconds; HvdliteTimeoutError past them (the
        request stays in flight)."""
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
    """The Work of a send or recv (an hvdlite.p2p.PeerWork): ``_source_rank()`` (c10d's name)
    is the sender's rank in the group, as gloo's recv Work gives it. Its future is completed
    by polling, never behind the collectives' completer."""

    completer = completers.POLLING

    def _source_rank(self):
        self.wait()
        return self._pending.source


class CoalescedWork(CallWork):
    """The Work of a coalescing block: done when every Work issued in it is done; its value is
    theirs, one after the other, and its error the first of theirs (each names its call)."""

    def __init__(self, works, timeout=None):
        self._works = works
        super().__init__(self, [v for w in works for v in (w._value or [])], "coalesced", timeout)
        if any(isinstance(w, PeerCallWork) for w in works):
            self.completer = completers.POLLING   # batch_isend_irecv: polled, as its transfers

    def poll(self):
        return all(w.is_completed() for w in self._works)

    def wait_within(self, limit):
        deadline = time.monotonic() + limit
        for w in self._works:
            if not w._done:
                w.wait_within(max(deadline - time.monotonic(), 1e-6))

    def settle(self):
        if self._done:
            return
        for w in self._works:
            w.settle()
        self.complete(next((w._error for w in self._works if w._error is not None), None))
