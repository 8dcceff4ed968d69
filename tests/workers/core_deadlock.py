"""Deadlocks and interrupted waits (tests/test_deadlock.py). Every rank prints what it saw as
one line "rank R <what> <seconds>" for the test to check.

'diverge': rank r all-reduces 'diverge.r' (nothing is ever submitted by every rank); with
HVDLITE_DEADLOCK_TIME_SECONDS set short, every rank gets HvdliteDeadlockError naming what each
rank waits for; the next matched collective works.
'set': the same inside process set [0, 1] of 3 ranks (rank 2 waits in a global collective
that the others join once their deadlock error came).
'add-set': rank 0 adds a process set while rank 1 all-reduces: a deadlock too.
'cross-set': 3 ranks wait on each other across process sets (rank 0 in set [0, 1], ranks 1
and 2 in the global set): HvdliteDeadlockError on every rank, and hvdlite stops; after
shutdown() and init() collectives work.
'cross-set-slow': rank 1 in the set's order, computing first: no error.
'slow': rank 1 computes (sleeps) for longer than the grace period before submitting; no
error.
'thread-computing': rank 1 waits on 'y' in a second thread while its main thread computes (a
pure Python loop) for longer than the grace period before it submits 'x', which rank 0 waits
on before it submits 'y'; no error.
'thread-computing-then-stuck': the same, but rank 1's main thread then waits on 'z', which
nobody else submits: a deadlock, named once the computing has ended.
'optimizer': after a step on both ranks, rank 0's optimizer step waits for the gradient its
backward submitted, rank 1 waits on 'other': a deadlock, named within the grace period.
'alarm': rank 0 waits for a collective that rank 1 submits only 6 s later; signal.alarm(2)'s
handler raises out of the wait; the request stays in flight and the Work completes when
waited for again. Then wait(timeout=...) raises HvdliteTimeoutError and a later wait
completes. Then rank 0 is interrupted in a synchronous all-reduce nobody else ever submits
(numpy, then torch), and every rank shuts down cleanly.
"""
import signal
import sys
import threading
import time

import numpy as np

import hvdlite as hvd

mode = sys.argv[1]


class Alarm(Exception):
    pass


def on_alarm(signum, frame):
    raise Alarm()


def say(line):
    """One line in one write: two threads of a rank print at once here, and print() writes the
    text and its newline separately, so their lines could run together."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def compute(seconds):
    """A pure Python busy loop (holding the GIL) for ``seconds``."""
    until, x = time.monotonic() + seconds, 0
    while time.monotonic() < until:
        for i in range(10000):
            x = (x * 31 + i) % 1000003
    return x


def check_next_collective_works(process_set=None, name="after"):
    n = hvd.size() if process_set is None else process_set.size()
    got = hvd.allreduce(np.ones(3, np.float32), op=hvd.Sum, name=name, process_set=process_set)
    assert (got == n).all(), got


def expect_deadlock(name, process_set=None):
    start = time.monotonic()
    try:
        hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum, name=name, process_set=process_set)
    except hvd.HvdliteDeadlockError as e:
        say(f"rank {hvd.rank()} deadlock {time.monotonic() - start:.2f} {e}")
    else:
        raise AssertionError("the divergent collective completed")


if mode == "diverge":
    hvd.init()
    expect_deadlock(f"diverge.{hvd.rank()}")
    check_next_collective_works()
elif mode == "set":
    ps = hvd.ProcessSet([0, 1])
    hvd.init(process_sets=[ps])
    if ps.included():
        expect_deadlock(f"diverge.{hvd.rank()}", ps)
        check_next_collective_works(ps, "after.set")
    check_next_collective_works()
elif mode == "add-set":
    # Rank 0 adds a process set (a collective over all ranks), rank 1 all-reduces: the
    # process-set change counts as a blocked wait like any other.
    hvd.init(process_sets="dynamic")
    start = time.monotonic()
    try:
        if hvd.rank() == 0:
            hvd.add_process_set([0, 1])
        else:
            hvd.allreduce(np.ones(2, np.float32), name="y")
    except hvd.HvdliteDeadlockError as e:
        say(f"rank {hvd.rank()} deadlock {time.monotonic() - start:.2f} {e}")
    check_next_collective_works()
elif mode == "cross-set":
    # Rank 0 waits for 'x' in set [0, 1]; ranks 1 and 2 wait for 'y' in the global set first
    # (rank 1 would all-reduce 'x' after it): no set sees all its members blocked on its own
    # requests. Then hvdlite has stopped: a later collective raises the same error.
    ps = hvd.ProcessSet([0, 1])
    hvd.init(process_sets=[ps])
    if hvd.rank() == 0:
        expect_deadlock("x", ps)
    else:
        expect_deadlock("y")
    try:
        hvd.allreduce(np.ones(2, np.float32), name="later")
    except hvd.HvdliteDeadlockError as e:
        say(f"rank {hvd.rank()} later-refused 0 {e}")
    hvd.shutdown()  # clean, and hvdlite starts again (the common end below: "done")
    hvd.init()
    check_next_collective_works()
elif mode == "cross-set-slow":
    # Rank 1 submits in the set's order ('x', then 'y'), but computes (sleeps) for longer than
    # the watch's time first: rank 1 is never stuck, so nothing is declared.
    ps = hvd.ProcessSet([0, 1])
    hvd.init(process_sets=[ps])
    if hvd.rank() == 1:
        time.sleep(float(sys.argv[2]))
    if ps.included():
        check_next_collective_works(ps, "x")
    check_next_collective_works(name="y")
    say(f"rank {hvd.rank()} slow-ok 0")
    check_next_collective_works()
elif mode == "slow":
    hvd.init()
    if hvd.rank() == 1:
        time.sleep(float(sys.argv[2]))
    start = time.monotonic()
    check_next_collective_works(name="slow")
    say(f"rank {hvd.rank()} slow-ok {time.monotonic() - start:.2f}")
    check_next_collective_works()
elif mode == "thread-computing":
    # Rank 1 waits on 'y' in a second thread while its main thread computes (a pure Python
    # loop) for argv[2] seconds and then submits 'x'; rank 0 waits on 'x', then submits 'y'.
    # Rank 1 computes all along, so it is never blocked (Note [computing ranks]): no error.
    hvd.init()
    hvd.barrier()
    start = time.monotonic()
    if hvd.rank() == 1:
        waiter = threading.Thread(target=check_next_collective_works, kwargs={"name": "y"})
        waiter.start()
        compute(float(sys.argv[2]))
        check_next_collective_works(name="x")
        waiter.join()
    else:
        check_next_collective_works(name="x")
        check_next_collective_works(name="y")
    say(f"rank {hvd.rank()} thread-ok {time.monotonic() - start:.2f}")
    check_next_collective_works()
elif mode == "thread-computing-then-stuck":
    # As above, but rank 1's main thread, once it has computed for argv[2] seconds, waits on
    # 'z', which no other rank submits: from then on every thread of every rank waits, and the
    # deadlock is named (on 'x' and on rank 1's 'y' and 'z') within the grace period.
    hvd.init()
    hvd.barrier()
    start = time.monotonic()

    def expect_deadlock_since_start(name):
        try:
            hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum, name=name)
        except hvd.HvdliteDeadlockError as e:
            say(f"rank {hvd.rank()} deadlock-{name} {time.monotonic() - start:.2f} {e}")
        else:
            raise AssertionError(f"{name} completed")

    if hvd.rank() == 1:
        waiter = threading.Thread(target=expect_deadlock_since_start, args=("y",))
        waiter.start()
        compute(float(sys.argv[2]))
        expect_deadlock_since_start("z")
        waiter.join()
    else:
        expect_deadlock_since_start("x")
    check_next_collective_works()
elif mode == "optimizer":
    # Rank 0's backward submits its gradient from autograd's hook, then its optimizer step
    # waits for it; rank 1 waits on 'other' instead. Nothing computes any more (the hook's
    # thread sits idle after backward): a deadlock, named within the grace period. One step
    # on both ranks first, so that torch's first-step work is not in the timing.
    import torch
    import hvdlite.torch as hvd_torch
    torch.set_num_threads(1)
    hvd.init()
    model = torch.nn.Linear(4, 2, bias=False)
    opt = hvd_torch.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters())

    def step():
        opt.zero_grad()
        model(torch.ones(3, 4)).sum().backward()
        opt.step()

    step()
    hvd.barrier()
    start = time.monotonic()
    if hvd.rank() == 0:
        try:
            step()
        except hvd.HvdliteDeadlockError as e:
            say(f"rank 0 deadlock {time.monotonic() - start:.2f} {e}")
        else:
            raise AssertionError("the step completed")
    else:
        expect_deadlock("other")
    check_next_collective_works()
elif mode == "alarm":
    hvd.init()
    signal.signal(signal.SIGALRM, on_alarm)
    x = np.ones(4, np.float32)
    if hvd.rank() == 0:
        work = hvd.allreduce_async(x, name="late", op=hvd.Sum)
        start = time.monotonic()
        signal.alarm(2)
        try:
            work.wait()
        except Alarm:
            say(f"rank 0 alarm {time.monotonic() - start:.2f}")
        else:
            raise AssertionError("the wait ended without the alarm")
        got = work.wait()  # rank 1 submits at 6 s: the same Work completes
        assert (got == hvd.size()).all(), got
        say(f"rank 0 rewait-ok {time.monotonic() - start:.2f}")

        work = hvd.allreduce_async(x, name="timed", op=hvd.Sum)
        start = time.monotonic()
        try:
            work.wait(timeout=0.5)
        except hvd.HvdliteTimeoutError:
            say(f"rank 0 timeout {time.monotonic() - start:.2f}")
        else:
            raise AssertionError("wait(timeout=0.5) returned")
        got = work.wait()
        assert (got == hvd.size()).all(), got
        say(f"rank 0 timeout-rewait-ok {time.monotonic() - start:.2f}")

        # A synchronous all-reduce that can never finish: the handler's exception leaves it.
        start = time.monotonic()
        signal.alarm(2)
        try:
            hvd.allreduce(x, name="never", op=hvd.Sum)
        except Alarm:
            say(f"rank 0 sync-alarm {time.monotonic() - start:.2f}")
        else:
            raise AssertionError("the never-matched all-reduce completed")
        # The torch adapter's synchronous all-reduce, likewise.
        import torch
        import hvdlite.torch as hvd_torch
        torch.set_num_threads(1)
        start = time.monotonic()
        signal.alarm(2)
        try:
            hvd_torch.allreduce(torch.ones(3), name="never.torch")
        except Alarm:
            say(f"rank 0 torch-alarm {time.monotonic() - start:.2f}")
        else:
            raise AssertionError("the never-matched torch all-reduce completed")
    else:
        time.sleep(6)
        hvd.allreduce(x, name="late", op=hvd.Sum)
        time.sleep(2)
        hvd.allreduce(x, name="timed", op=hvd.Sum)
    hvd.barrier()  # rank 0's 'never' is still in flight here; the barrier is not held up
    rank, start = hvd.rank(), time.monotonic()
    hvd.shutdown()
    say(f"rank {rank} shutdown {time.monotonic() - start:.2f}")
    sys.exit(0)
else:
    raise SystemExit(f"unknown mode {mode}")
rank = hvd.rank()
hvd.shutdown()
say(f"rank {rank} done")
