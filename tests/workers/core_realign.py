"""Unnamed collectives line up again after a failure some ranks caused (tests/test_deadlock.py;
Note [unnamed names after a failure] in src/hvdlite/policy/names.py). 3 ranks; every rank
prints "rank R <what> ..." lines for the test.

'deadlock': a few unnamed collectives line the ranks up; then rank 1 skips an unnamed
all-reduce and goes on to an unnamed allgather_object, which the others never submit: with
HVDLITE_DEADLOCK_TIME_SECONDS short every rank gets HvdliteDeadlockError. Then unnamed
all-reduces, allgather_object and broadcast_object (numpy and hvdlite.torch) must work on
every rank, twice over (the same failure is not met twice).
'mismatch': rank 1 skips an unnamed all-reduce of 2 elements and all-reduces 5, which takes
the skipped one's name: every rank gets HvdliteMismatchError; then the same checks.
'join': Horovod's test_horovod_join_allgather at 3 ranks: each rank in turn joins first while
the others all-gather (refused after join(), on the others only) and then join; an unnamed
allgather_object follows each turn. The joined rank gets no error, yet numbers afresh like
the others (from its join). Then the same checks.
'add-set': rank 1 skips an add_process_set (named in the core's call order) and waits in an
unnamed all-reduce: the deadlock error comes on every rank; then adding and removing a set
works, and the same checks.
'c10d-mismatch': the "hvdlite" torch.distributed backend (its own numbering, Note [c10d
names]): rank 1 skips a dist.all_reduce and broadcasts, which takes its name: every rank gets
the mismatch error; then dist.all_reduce, all_gather_object and broadcast_object_list, and
the unnamed collectives above, work on every rank.
'c10d-deadlock': rank 1 skips a dist.all_reduce and waits in an unnamed hvdlite all-reduce:
the deadlock error comes on every rank; then the same checks.
'behind-add-set' (Note [the ranks that fell behind] in csrc/engine/deadlock.h): Horovod's
test_horovod_reducescatter_prescale at 3 ranks, whose check fails on ranks 0 and 2 only: rank 1
goes on to its next unnamed collective and waits there, while ranks 0 and 2 take a while over
their error (a test runner reporting it) and then add a process set (the next test). Only rank 1
gets the deadlock error; the others' add_process_set waits for rank 1, which adds the set after
its error and matches it. Then the new set, removing it, and the checks above.
'behind-unnamed': the same, but rank 1 waits in an unnamed allgather_object and ranks 0 and 2
go on to an unnamed all-reduce (Horovod's test_horovod_join_allreduce, whose check fails on
ranks 1 and 2 only, against the next test): the all-reduce they left pending was named before
the failure, and rank 1's next unnamed all-reduce, after its error, must get the same name.
"""
import sys
import time

import numpy as np

import hvdlite as hvd

mode = sys.argv[1]


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {hvd.rank()}: {what}")


def report(error, start):
    print(f"rank {hvd.rank()} failed {time.monotonic() - start:.2f} "
          f"{type(error).__name__}: {error}", flush=True)


def unnamed_collectives_work(round_):
    """Unnamed collectives of every kind the issue names, checked on every rank."""
    import torch

    import hvdlite.torch as hvd_torch
    r, n = hvd.rank(), hvd.size()
    got = hvd.allreduce(np.full(3, r + 1.0), op=hvd.Sum)
    check((got == n * (n + 1) / 2).all(), f"allreduce gave {got}")
    objs = hvd.allgather_object({"rank": r, "round": round_})
    check(objs == [{"rank": i, "round": round_} for i in range(n)], f"allgather_object {objs}")
    obj = hvd.broadcast_object(f"from {r}" if r == 2 else None, root_rank=2)
    check(obj == "from 2", f"broadcast_object {obj!r}")
    t = hvd_torch.allreduce(torch.full((2,), float(r)), op=hvd_torch.Sum)
    check(torch.equal(t, torch.full((2,), float(sum(range(n))))), f"hvdlite.torch {t}")
    print(f"rank {r} aligned {round_}", flush=True)


if mode in ("deadlock", "mismatch"):
    hvd.init()
    unnamed_collectives_work("before")
    start = time.monotonic()
    try:
        if mode == "deadlock":
            if hvd.rank() != 1:
                hvd.allreduce(np.ones(4))            # rank 1 never submits this one
            hvd.allgather_object("late")             # ranks 0 and 2 never get here
        elif hvd.rank() != 1:
            hvd.allreduce(np.ones(2))                # rank 1 skips it ...
        else:
            hvd.allreduce(np.ones(5))                # ... and takes its name with 5 elements
    except (hvd.HvdliteDeadlockError, hvd.HvdliteMismatchError) as e:
        report(e, start)
    else:
        raise AssertionError(f"rank {hvd.rank()}: the skipped collective did not fail")
    unnamed_collectives_work("after")
    unnamed_collectives_work("again")
    print(f"rank {hvd.rank()} done", flush=True)
    hvd.shutdown()
elif mode == "add-set":
    hvd.init(process_sets="dynamic")
    unnamed_collectives_work("before")
    start = time.monotonic()
    try:
        if hvd.rank() != 1:
            hvd.add_process_set([0, 2])              # rank 1 skips it ...
        else:
            hvd.allreduce(np.ones(2))                # ... and waits where no one else does
    except hvd.HvdliteDeadlockError as e:
        report(e, start)
    else:
        raise AssertionError(f"rank {hvd.rank()}: the skipped collective did not fail")
    pair = hvd.add_process_set([0, 2])
    if hvd.rank() != 1:
        got = hvd.allreduce(np.ones(2), op=hvd.Sum, process_set=pair)
        check((got == 2).all(), f"allreduce in the new set gave {got}")
    check(hvd.remove_process_set(pair), "the new set was removed")
    unnamed_collectives_work("after")
    unnamed_collectives_work("again")
    print(f"rank {hvd.rank()} done", flush=True)
    hvd.shutdown()
elif mode in ("behind-add-set", "behind-unnamed"):
    hvd.init(process_sets="dynamic")
    unnamed_collectives_work("before")
    start = time.monotonic()
    if hvd.rank() == 1:
        try:
            if mode == "behind-add-set":
                hvd.allreduce(np.ones(4))            # the next step of a loop the others left
            else:
                hvd.allgather_object("late")
        except hvd.HvdliteDeadlockError as e:
            report(e, start)
        else:
            raise AssertionError("rank 1: the skipped collective did not fail")
    else:
        time.sleep(1.5)                              # an error on these ranks, reported
    if mode == "behind-add-set":
        pair = hvd.add_process_set([0, 2])
        print(f"rank {hvd.rank()} went-on {time.monotonic() - start:.2f}", flush=True)
        if hvd.rank() != 1:
            got = hvd.allreduce(np.ones(2), op=hvd.Sum, process_set=pair)
            check((got == 2).all(), f"allreduce in the new set gave {got}")
        check(hvd.remove_process_set(pair), "the new set was removed")
    else:
        got = hvd.allreduce(np.full(3, 2.0), op=hvd.Sum)
        print(f"rank {hvd.rank()} went-on {time.monotonic() - start:.2f}", flush=True)
        check((got == 6).all(), f"allreduce after the failure gave {got}")
    unnamed_collectives_work("after")
    unnamed_collectives_work("again")
    print(f"rank {hvd.rank()} done", flush=True)
    hvd.shutdown()
elif mode == "join":
    hvd.init()
    unnamed_collectives_work("before")
    start, first_error = time.monotonic(), None
    for first in range(hvd.size()):
        if hvd.rank() != first:
            try:
                hvd.allgather(np.ones((2, 3)))
            except hvd.HvdliteError as e:
                first_error = first_error or e
            else:
                raise AssertionError(f"rank {hvd.rank()}: allgather after join() worked")
        last = hvd.join()
        check(last != first, f"join() returned {last}, the first rank to join")
        got = hvd.allgather_object(last)
        check(got == [last] * hvd.size(), f"allgather_object after turn {first}: {got}")
    report(first_error, start)
    unnamed_collectives_work("after")
    unnamed_collectives_work("again")
    print(f"rank {hvd.rank()} done", flush=True)
    hvd.shutdown()
elif mode in ("c10d-mismatch", "c10d-deadlock"):
    import datetime

    import torch
    import torch.distributed as dist

    import hvdlite.torch.distributed as hvd_dist
    hvd_dist.init_process_group(timeout=datetime.timedelta(seconds=60))   # > the grace
    r, n = dist.get_rank(), dist.get_world_size()
    start = time.monotonic()
    try:
        if r != 1:
            dist.all_reduce(torch.ones(3))           # rank 1 skips it
        elif mode == "c10d-mismatch":
            dist.broadcast(torch.zeros(2), src=0)    # ... and takes its name
        else:
            hvd.allreduce(np.ones(2))                # ... and waits where no one else does
    except (hvd.HvdliteMismatchError, hvd.HvdliteDeadlockError) as e:
        report(e, start)
    else:
        raise AssertionError(f"rank {r}: the skipped collective did not fail")
    for round_ in ("after", "again"):
        t = torch.full((2,), float(r))
        dist.all_reduce(t)
        check(torch.equal(t, torch.full((2,), float(sum(range(n))))), f"all_reduce {t}")
        objs = [None] * n
        dist.all_gather_object(objs, (r, round_))
        check(objs == [(i, round_) for i in range(n)], f"all_gather_object {objs}")
        box = [f"from {r}" if r == 2 else None]
        dist.broadcast_object_list(box, src=2)
        check(box == ["from 2"], f"broadcast_object_list {box}")
        unnamed_collectives_work(round_)
    print(f"rank {r} done", flush=True)
    dist.destroy_process_group()
