"""Nothing hangs: the deadlock detector (csrc/engine/deadlock.h) and interruptible waits
(Note [interruptible waits] in csrc/bindings.cc), end to end over MPI.

- Ranks that wait on collectives no other rank submitted get HvdliteDeadlockError on every
  rank within HVDLITE_DEADLOCK_TIME_SECONDS (+5 s), naming what each waits for and who
  submitted it, at 2 and 3 ranks and inside a process set; the next collective works.
- Ranks waiting on each other across process sets get it on every rank after twice that
  time, and hvdlite stops; not while one rank computes.
- A rank that computes for longer than that before submitting trips nothing.
- signal.alarm's handler raises out of a wait that cannot finish yet, within 3 s; the Work can
  be waited on again; wait(timeout=) raises HvdliteTimeoutError; shutdown is then clean.
- After a rank skipped an unnamed collective (a deadlock error, or a mismatch where the next
  call took its name), unnamed collectives line up again on every rank: numpy, hvdlite.torch
  and the "hvdlite" torch.distributed backend (tests/workers/core_realign.py).
- When some ranks had waited clearly longer than the others (they fell behind: the others went
  on, after a failure only they saw), only those ranks get the error; the others' collectives
  stay pending until the ranks behind reach them, and the job goes on in step.
"""
import re

import pytest

from mpi_launch import run_mpi

GRACE = 3


def _lines(proc, what):
    """{rank: (seconds, rest of line)} for lines "rank R <what> <seconds> ..."."""
    found = {}
    for line in proc.stdout.splitlines():
        m = re.match(rf"rank (\d+) {what} ([\d.]+) ?(.*)", line)
        if m:
            found[int(m.group(1))] = (float(m.group(2)), m.group(3))
    return found


@pytest.mark.parametrize("np_", [2, 3])
def test_divergent_allreduces_end_in_a_deadlock_error_on_every_rank(np_):
    proc = run_mpi(np_, "workers/core_deadlock.py", "diverge",
                   env={"HVDLITE_DEADLOCK_TIME_SECONDS": GRACE}, timeout=120)
    got = _lines(proc, "deadlock")
    assert sorted(got) == list(range(np_)), proc.stdout
    waits = ", ".join(f"rank {r} waits for 'diverge.{r}' (submitted by rank {r})" for r in range(np_))
    for rank, (seconds, message) in got.items():
        assert GRACE - 0.5 <= seconds <= GRACE + 5, (rank, seconds)
        assert message.startswith(f"deadlock: every rank has been blocked waiting for {GRACE} s"), message
        assert waits in message, message
    assert proc.stdout.count("done") == np_, proc.stdout  # the next collective worked


def test_deadlock_in_a_process_set_names_the_set_and_global_ranks():
    proc = run_mpi(3, "workers/core_deadlock.py", "set",
                   env={"HVDLITE_DEADLOCK_TIME_SECONDS": GRACE}, timeout=120)
    got = _lines(proc, "deadlock")
    assert sorted(got) == [0, 1], proc.stdout
    for seconds, message in got.values():
        assert seconds <= GRACE + 5
        assert message.startswith("deadlock in process set 1 (ranks 0, 1):"), message
        assert ("rank 0 waits for 'diverge.0' (submitted by rank 0), "
                "rank 1 waits for 'diverge.1' (submitted by rank 1)") in message, message
    assert proc.stdout.count("done") == 3, proc.stdout


def test_a_process_set_change_against_a_collective_is_a_deadlock_too():
    proc = run_mpi(2, "workers/core_deadlock.py", "add-set",
                   env={"HVDLITE_DEADLOCK_TIME_SECONDS": GRACE}, timeout=120)
    got = _lines(proc, "deadlock")
    assert sorted(got) == [0, 1], proc.stdout
    for seconds, message in got.values():
        assert seconds <= GRACE + 5
        assert re.search(r"rank 0 waits for 'hvdlite\.add_process_set\.\d+' \(submitted by rank 0\), "
                         r"rank 1 waits for 'y' \(submitted by rank 1\)", message), message
    assert proc.stdout.count("done") == 2, proc.stdout


def test_ranks_waiting_on_each_other_across_process_sets_get_a_deadlock_error_and_stop():
    proc = run_mpi(3, "workers/core_deadlock.py", "cross-set",
                   env={"HVDLITE_DEADLOCK_TIME_SECONDS": GRACE}, timeout=120)
    got = _lines(proc, "deadlock")
    assert sorted(got) == [0, 1, 2], proc.stdout
    for seconds, message in got.values():
        assert 2 * GRACE - 0.5 <= seconds <= 2 * GRACE + 5, seconds
        assert message.startswith("deadlock across process sets: every rank has been blocked "
                                  f"waiting for {2 * GRACE} s"), message
        assert ("rank 0 waits for 'x' in process set 1 (ranks 0, 1), not submitted by rank 1; "
                "ranks 1 and 2 wait for 'y' in the global process set, not submitted by rank 0"
                ) in message, message
    later = _lines(proc, "later-refused")
    assert sorted(later) == [0, 1, 2], proc.stdout
    assert all("deadlock across process sets" in m for _, m in later.values()), later
    assert proc.stdout.count("done") == 3, proc.stdout


def test_a_rank_computing_while_others_wait_across_process_sets_trips_nothing():
    proc = run_mpi(3, "workers/core_deadlock.py", "cross-set-slow", 3 * GRACE,
                   env={"HVDLITE_DEADLOCK_TIME_SECONDS": GRACE}, timeout=120)
    assert sorted(_lines(proc, "slow-ok")) == [0, 1, 2], proc.stdout
    assert "Deadlock" not in proc.stdout, proc.stdout


def test_a_rank_computing_longer_than_the_grace_period_trips_nothing():
    proc = run_mpi(2, "workers/core_deadlock.py", "slow", 2 * GRACE,
                   env={"HVDLITE_DEADLOCK_TIME_SECONDS": GRACE}, timeout=120)
    got = _lines(proc, "slow-ok")
    assert sorted(got) == [0, 1], proc.stdout
    assert got[0][0] >= 2 * GRACE - 0.5, got  # rank 0 waited for rank 1 all along
    assert proc.stdout.count("done") == 2, proc.stdout


@pytest.mark.parametrize("grace", [GRACE, None])
def test_a_thread_waiting_while_the_main_thread_computes_trips_nothing(grace):
    # Issue 31's repro: rank 1's second thread waits on 'y' while its main thread computes for
    # 8 s before submitting 'x'; rank 0 waits on 'x' and then submits 'y'. With a 3 s grace
    # and with the default one, it finishes at about 8 s.
    env = {} if grace is None else {"HVDLITE_DEADLOCK_TIME_SECONDS": grace}
    proc = run_mpi(2, "workers/core_deadlock.py", "thread-computing", 8, env=env, timeout=120)
    got = _lines(proc, "thread-ok")
    assert sorted(got) == [0, 1], proc.stdout
    assert all(7.5 <= seconds <= 8 + 5 for seconds, _ in got.values()), got
    assert "Deadlock" not in proc.stdout, proc.stdout
    assert proc.stdout.count("done") == 2, proc.stdout


def test_a_deadlock_after_the_computing_thread_ends_is_named_within_the_grace_period():
    # The same, but rank 1's main thread then waits on 'z', which nobody else submits: every
    # wait fails once the computing ended (at 2 * GRACE) and the grace period passed.
    proc = run_mpi(2, "workers/core_deadlock.py", "thread-computing-then-stuck", 2 * GRACE,
                   env={"HVDLITE_DEADLOCK_TIME_SECONDS": GRACE}, timeout=120)
    got = {f"{rank} {what}": seconds for rank, what in ((0, "x"), (1, "y"), (1, "z"))
           for seconds, _ in [_lines(proc, f"deadlock-{what}").get(rank, (None, None))]}
    assert None not in got.values(), proc.stdout
    for seconds in got.values():
        assert 3 * GRACE - 0.5 <= seconds <= 2 * GRACE + 2 * GRACE + 1, got
    for rank, what in ((0, "x"), (1, "y"), (1, "z")):
        message = _lines(proc, f"deadlock-{what}")[rank][1]
        assert ("rank 0 waits for 'x' (submitted by rank 0), rank 1 waits for 'y' (submitted by "
                "rank 1) and 'z' (submitted by rank 1)") in message, message
    assert proc.stdout.count("done") == 2, proc.stdout


def test_an_optimizer_step_against_another_collective_is_a_deadlock():
    # The gradient was submitted from backward's hook, whose thread then sits idle: the rank
    # is blocked in the step's synchronize, not computing.
    proc = run_mpi(2, "workers/core_deadlock.py", "optimizer",
                   env={"HVDLITE_DEADLOCK_TIME_SECONDS": GRACE}, timeout=180)
    got = _lines(proc, "deadlock")
    assert sorted(got) == [0, 1], proc.stdout
    for seconds, message in got.values():
        assert GRACE - 0.5 <= seconds <= 2 * GRACE, got
        assert ("rank 0 waits for 'weight' (submitted by rank 0), rank 1 waits for 'other' "
                "(submitted by rank 1)") in message, message
    assert proc.stdout.count("done") == 2, proc.stdout


def test_signal_handlers_interrupt_waits_and_timeouts_leave_requests_in_flight():
    proc = run_mpi(2, "workers/core_deadlock.py", "alarm", timeout=120)
    got = {what: _lines(proc, what).get(0) for what in
           ("alarm", "rewait-ok", "timeout", "timeout-rewait-ok", "sync-alarm", "torch-alarm")}
    assert all(got.values()), proc.stdout
    assert 1.9 <= got["alarm"][0] <= 3, got          # signal.alarm(2) raised within 3 s
    assert got["rewait-ok"][0] >= 5.5, got           # the same Work completed later
    assert 0.45 <= got["timeout"][0] <= 1.5, got     # wait(timeout=0.5)
    assert 1.9 <= got["sync-alarm"][0] <= 3, got     # a synchronous all-reduce too
    assert 1.9 <= got["torch-alarm"][0] <= 3, got    # and the torch adapter's
    shutdown = _lines(proc, "shutdown")
    assert sorted(shutdown) == [0, 1] and all(s <= 5 for s, _ in shutdown.values()), proc.stdout


@pytest.mark.parametrize("mode, error", [("deadlock", "HvdliteDeadlockError"),
                                         ("mismatch", "HvdliteMismatchError"),
                                         ("join", "HvdliteInvalidArgumentError"),
                                         ("add-set", "HvdliteDeadlockError"),
                                         ("c10d-mismatch", "HvdliteMismatchError"),
                                         ("c10d-deadlock", "HvdliteDeadlockError")])
def test_unnamed_collectives_line_up_again_after_a_rank_skipped_one(mode, error):
    """Note [unnamed names after a failure]: 3 ranks, rank 1 skips an unnamed collective
    (or, 'join', each rank in turn joins while the others all-gather); every rank gets the
    error, then unnamed all-reduce, allgather_object and broadcast_object work on every rank
    (twice: the numbering starts over once per failure)."""
    proc = run_mpi(3, "workers/core_realign.py", mode,
                   env={"HVDLITE_DEADLOCK_TIME_SECONDS": GRACE}, timeout=150)
    failed = _lines(proc, "failed")
    assert sorted(failed) == [0, 1, 2], proc.stdout
    for seconds, message in failed.values():
        assert message.startswith(error), message
        if error == "HvdliteDeadlockError":
            assert seconds <= GRACE + 5, seconds
    for round_ in ("after", "again"):
        assert sorted(r for r in range(3) if f"rank {r} aligned {round_}" in proc.stdout) == \
            [0, 1, 2], proc.stdout
    assert proc.stdout.count("done") == 3, proc.stdout


@pytest.mark.parametrize("mode", ["behind-add-set", "behind-unnamed"])
def test_only_the_ranks_that_fell_behind_get_the_deadlock_error(mode):
    """Note [the ranks that fell behind]: 3 ranks; ranks 0 and 2 leave a loop rank 1 goes on
    with (a check failed on their data only) and, after a while, go on to a process-set change
    or an unnamed all-reduce. Only rank 1 gets HvdliteDeadlockError; the others' request
    completes once rank 1 comes to it, and unnamed collectives stay in step afterwards."""
    proc = run_mpi(3, "workers/core_realign.py", mode,
                   env={"HVDLITE_DEADLOCK_TIME_SECONDS": GRACE}, timeout=150)
    failed = _lines(proc, "failed")
    assert sorted(failed) == [1], proc.stdout
    seconds, message = failed[1]
    assert message.startswith("HvdliteDeadlockError"), message
    assert "rank 1 has waited longest" in message, message
    assert "only its requests fail" in message, message
    assert seconds <= 1.5 + GRACE + 5, seconds
    went_on = _lines(proc, "went-on")
    assert sorted(went_on) == [0, 1, 2], proc.stdout
    for round_ in ("after", "again"):
        assert sorted(r for r in range(3) if f"rank {r} aligned {round_}" in proc.stdout) == \
            [0, 1, 2], proc.stdout
    assert proc.stdout.count("done") == 3, proc.stdout
