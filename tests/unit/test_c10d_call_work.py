"""hvdlite.c10d.call_work: a c10d Work over a pending hvdlite Work: wait() with the group's
timeout, errors naming the call, futures completed on demand (once the requests finish, by a
thread in order, or by polling), coalescing blocks and point-to-point Works."""

import threading

import pytest

from hvdlite.c10d import call_work
from hvdlite.c10d.call_work import (CallWork, CoalescedWork, Completer, PeerCallWork,
                                     PollingCompleter)
from hvdlite.exceptions import HvdliteInvalidArgumentError, HvdliteTimeoutError


class Pending:
    """An in-flight hvdlite Work: finished by ``finish()`` (with an error, or not)."""

    def __init__(self, source=None):
        self.source = source
        self._event = threading.Event()
        self._error = None
        self.waits = 0

    def finish(self, error=None):
        self._error = error
        self._event.set()

    def poll(self):
        return self._event.is_set()

    def when_done(self, callback):
        """hvdlite.work.Work's: ``callback()`` on another thread once finished."""
        def run():
            self._event.wait()
            callback()
        threading.Thread(target=run, daemon=True).start()

    def wait(self, seconds=None):
        self.waits += 1
        if not self._event.wait(seconds):
            raise HvdliteTimeoutError("wait: timed out")
        if self._error is not None:
            raise self._error


def test_a_finished_call_is_complete_at_once():
    work = CallWork(None, ["out"], "allreduce (call 0 of group '0')")
    assert work.is_completed() and work.is_success() and work.exception() is None
    assert work.wait() is True and work.result() == ["out"]
    assert work.get_future().result(timeout=0) == ["out"]
    assert repr(work) == "<HvdliteWork allreduce (call 0 of group '0'): done>"


def test_wait_raises_the_engines_error_naming_the_call_each_time():
    pending = Pending()
    work = CallWork(pending, ["out"], "broadcast (call 1 of group '0')")
    assert not work.is_completed() and "pending" in repr(work)
    pending.finish(HvdliteInvalidArgumentError("root differs"))
    for _ in range(2):
        with pytest.raises(HvdliteInvalidArgumentError,
                           match=r"^broadcast \(call 1 of group '0'\): root differs$"):
            work.wait()
    assert work.is_completed() and not work.is_success()
    assert str(work.exception()) == "broadcast (call 1 of group '0'): root differs"
    assert pending.waits == 1      # settled once
    with pytest.raises(HvdliteInvalidArgumentError):
        work.get_future().result(timeout=0)


def test_the_groups_timeout_ends_a_wait_and_the_call_goes_on():
    class GroupTimeout(HvdliteTimeoutError):
        pass

    class Work(CallWork):
        timeout_error = GroupTimeout

    pending = Pending()
    work = Work(pending, [1], "barrier (call 0 of group '0')", timeout=0.05)
    with pytest.raises(GroupTimeout, match=r"barrier \(call 0 of group '0'\): Timed out "
                                           r"waiting 50ms"):
        work.wait()
    with pytest.raises(GroupTimeout, match="Timed out waiting 20ms"):
        work.wait(timeout=0.02)     # the call's own timeout first
    assert not work.is_completed()
    pending.finish()
    assert work.wait() is True and work.is_success()


def test_a_future_completes_without_anyone_waiting():
    pending = Pending()
    work = CallWork(pending, ["out"], "allreduce")
    future = work.get_future()
    assert work.get_future() is future and not future.done()
    assert work.completer is call_work.WATCHING   # a collective's: watched, not waited for
    pending.finish()
    assert future.result(timeout=10) == ["out"]
    assert work.is_completed() and pending.waits == 1   # settled once, after it finished


def test_a_coalescing_block_is_done_when_every_call_in_it_is():
    first, second = Pending(), Pending()
    works = [CallWork(first, ["a"], "allreduce (call 0)"),
             CallWork(second, ["b", "c"], "allreduce (call 1)")]
    block = CoalescedWork(works, timeout=0.05)
    assert block.completer is call_work.ORDERED
    first.finish()
    assert not block.is_completed()
    with pytest.raises(HvdliteTimeoutError, match="coalesced: Timed out waiting 50ms"):
        block.wait()
    second.finish(ValueError("shapes differ"))
    with pytest.raises(ValueError, match=r"^allreduce \(call 1\): shapes differ$"):
        block.wait()      # the call's own error, named once
    assert block.get_future().exception(timeout=0) is not None


def test_point_to_point_works_are_polled_and_know_their_source():
    pending = Pending(source=1)
    work = PeerCallWork(pending, ["t"], "point-to-point in group '0'")
    assert work.completer is call_work.POLLING
    assert CoalescedWork([work]).completer is call_work.POLLING
    future = work.get_future()
    pending.finish()
    assert future.result(timeout=10) == ["t"]
    assert work._source_rank() == 1


def test_a_coalescing_blocks_value_is_every_calls_in_order():
    block = CoalescedWork([CallWork(None, ["a"], "x"), CallWork(None, None, "barrier"),
                           CallWork(None, ["b", "c"], "y")])
    assert block.result() == ["a", "b", "c"] and block.is_success()


class Settles:
    def __init__(self, log, name):
        self.log, self.name = log, name
        self.finished = threading.Event()
        self.settled = threading.Event()

    def settle(self):
        self.finished.wait(10)
        self.log.append(self.name)
        self.settled.set()

    def is_completed(self):
        if self.finished.is_set() and not self.settled.is_set():
            self.settle()
        return self.settled.is_set()


def _two_works_given_to(completer):
    """(log, first, second): two Works given in that order; the second has finished."""
    log = []
    first, second = Settles(log, "first"), Settles(log, "second")
    completer.submit(first)
    completer.submit(second)
    second.finished.set()
    return log, first, second


def test_the_ordered_completer_settles_in_the_order_given():
    log, first, second = _two_works_given_to(Completer("test-ordered"))
    assert not second.settled.wait(0.1)   # held back behind the first
    first.finished.set()
    assert second.settled.wait(10) and log == ["first", "second"]


def test_the_polling_completer_completes_whichever_finishes_first():
    completer = PollingCompleter("test-polling")
    log, first, second = _two_works_given_to(completer)
    assert second.settled.wait(10) and log == ["second"]
    first.finished.set()
    assert first.settled.wait(10) and log == ["second", "first"]
    # idle, then more work: it wakes on its queue
    third = Settles(log, "third")
    third.finished.set()
    completer.submit(third)
    assert third.settled.wait(10)
