"""hvdlite.c10d.calls: a group's calls named in call order, errors naming the call, c10d's
reduce ops and timeouts."""

import datetime
import threading

import pytest

from hvdlite.c10d.calls import CallOrder, members, named_error, reduce_op, seconds, timed_out
from hvdlite.exceptions import HvdliteError, HvdliteTimeoutError, HvdliteUnsupportedError
from hvdlite.policy import Average, Max, Min, Product, Sum


def test_calls_are_numbered_per_group_in_call_order():
    world, pair = CallOrder("0"), CallOrder("1")
    assert world.next("allreduce") == ("c10d.0.0", "allreduce (call 0 of group '0')")
    assert world.next("barrier") == ("c10d.0.1", "barrier (call 1 of group '0')")
    assert pair.next("broadcast") == ("c10d.1.0", "broadcast (call 0 of group '1')")


def test_a_groups_calls_are_numbered_afresh_after_a_failure_in_its_process_set():
    """Note [unnamed names after a failure]: the group's set (4) restarts, the world's not."""
    from hvdlite.policy.names import reset_name_counters, restart_numbering
    group, world = CallOrder("5", 4), CallOrder("0", 0)
    assert group.next("allreduce")[0] == "c10d.5.0"
    assert world.next("allreduce")[0] == "c10d.0.0"
    restart_numbering(4, 31)
    assert group.next("allreduce") == ("c10d.5.r31.0",
                                       "allreduce (call r31.0 of group '5')")
    assert world.next("allreduce")[0] == "c10d.0.1"
    reset_name_counters()


def test_threads_issuing_calls_never_share_a_number():
    calls, names = CallOrder("g"), []

    def issue():
        for _ in range(500):
            names.append(calls.next("x")[0])
    threads = [threading.Thread(target=issue) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(names, key=lambda n: int(n.rsplit(".", 1)[1])) == [
        f"c10d.g.{i}" for i in range(2000)]


def test_members_of_a_call():
    assert members("c10d.0.3", 1) == ["c10d.0.3"]
    assert members("c10d.0.3", 3) == ["c10d.0.3.0", "c10d.0.3.1", "c10d.0.3.2"]


def test_errors_name_the_call_first_and_keep_their_type():
    try:
        raise ValueError("shapes differ")
    except ValueError as e:
        named = named_error(e, "allreduce (call 2 of group '0')")
    assert type(named) is ValueError and named.__traceback__ is None
    assert str(named) == "allreduce (call 2 of group '0'): shapes differ"

    class TwoArgs(Exception):
        def __init__(self, a, b):
            super().__init__(a, b)
    other = named_error(TwoArgs("x", "y"), "barrier")
    assert type(other) is HvdliteError and str(other).startswith("barrier: ")


class _RedOpType:
    """Stands in for c10d's enum: shown as ``RedOpType.NAME``."""

    def __init__(self, name):
        self.name = name

    def __str__(self):
        return f"RedOpType.{self.name}"


def test_c10d_reduce_ops_map_to_the_cores():
    assert [reduce_op(_RedOpType(n), "allreduce") for n in ("SUM", "AVG", "MIN", "MAX", "PRODUCT")] \
        == [Sum, Average, Min, Max, Product]
    with pytest.raises(HvdliteUnsupportedError,
                       match=r"allreduce: reduce op RedOpType.BAND is not supported by the "
                             r"hvdlite backend \(supported: SUM, AVG, MIN, MAX, PRODUCT\)"):
        reduce_op(_RedOpType("BAND"), "allreduce")


def test_seconds_of_a_timeout():
    assert seconds(datetime.timedelta(minutes=2)) == 120.0
    assert seconds(1.5) == 1.5 and seconds(3) == 3.0
    # unset (c10d's kUnsetTimeout is -1 ms), zero, none: no limit
    assert seconds(datetime.timedelta(milliseconds=-1)) is None
    assert seconds(0) is None and seconds(None) is None


def test_the_error_past_a_timeout_names_call_and_limit():
    class Mine(HvdliteTimeoutError):
        pass
    error = timed_out(Mine, "barrier (call 0 of group '0')", 2.0)
    assert type(error) is Mine
    assert str(error).startswith("barrier (call 0 of group '0'): Timed out waiting 2000ms "
                                 "(the group's timeout)")
    assert "still in flight" in str(error)
