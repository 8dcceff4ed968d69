"""The threads that complete a c10d Work's future when nobody calls ``wait()``.

Note [futures on demand]
A future needs a thread to complete it when nobody calls wait(): a completer. A Work that goes
through it costs the waiter a second thread handoff (engine -> completer -> waiter, where
wait() alone is engine -> waiter), and the completer holds the hvdlite Work's lock while it
waits, so a wait() behind it gets both. Most callers never ask for the future (FSDP2's
all-gathers, dist.* with async_op=True then wait()): a Work goes to a completer only once
get_future() is called. A Work that is dropped unwaited is finished by hvdlite's orphan
reaping, its copy-back step (non-contiguous tensors) not run, as with no future.
"""

import queue
import threading
import time


class Completer:
    """One thread that settles the Works given to it (``work.settle()``), in the order they
    came: the order a group's collectives finish in; a later group's future can only be held
    back behind an earlier one. Started by the first Work."""

    def __init__(self, thread_name):
        self._queue = queue.SimpleQueue()
        self._thread = None
        self._thread_name = thread_name
        self._lock = threading.Lock()

    def submit(self, work):
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self.run, name=self._thread_name,
                                                    daemon=True)
                    self._thread.start()
        self._queue.put(work)

    def run(self):
        while True:
            self._queue.get().settle()


class PollingCompleter(Completer):
    """One thread that completes Works in whatever order they finish (``work.is_completed()``
    settles a finished one): it polls every Work given to it, sleeping a little longer each
    idle pass (up to a millisecond), and sleeps on its queue while none is in flight."""

    def run(self):
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


#: the collectives' futures, in order
ORDERED = Completer("hvdlite-c10d-completer")
#: point-to-point futures, polled: a receive may wait on a message that a later collective's
#: future is needed to send
POLLING = PollingCompleter("hvdlite-c10d-p2p")
