"""The stall inspector at 3 ranks: the warning names the tensor, the ranks that submitted it
and the ranks that have not; HVDLITE_STALL_SHUTDOWN_TIME_SECONDS ends the job with that
message as the error on every rank. The warning is tested for a tensor negotiated on the
cached path, the shutdown for one that goes through the coordinator."""
import re

import pytest

from mpi_launch import run_mpi

STALL = r"'fc\.weight' waited \d+ s: ranks 0, 2 submitted it; rank 1 has not"


def test_stall_warning_names_submitting_and_missing_ranks():
    proc = run_mpi(3, "workers/core_stall.py", "warn",
                   env={"HVDLITE_STALL_CHECK_TIME_SECONDS": "1"}, timeout=120)
    warnings = [l for l in proc.stdout.splitlines() if "warning: stall" in l]
    assert warnings and all(l.startswith("[hvdlite rank 0]") for l in warnings), proc.stdout
    assert re.search(STALL, warnings[0]), warnings
    assert proc.stdout.count("done") == 3, proc.stdout


def test_stall_warning_in_a_process_set_names_global_ranks_and_the_set():
    proc = run_mpi(3, "workers/core_stall.py", "set",
                   env={"HVDLITE_STALL_CHECK_TIME_SECONDS": "1"}, timeout=120)
    warnings = [l for l in proc.stdout.splitlines() if "warning: stall" in l]
    # positions within the set would read "rank 0 submitted it; rank 1 has not"
    expected = (r"^\[hvdlite rank 1\] warning: stall in process set 1 \(ranks 1, 2\): "
                r"'ps\.weight' waited \d+ s: rank 1 submitted it; rank 2 has not")
    assert warnings and re.search(expected, warnings[0]), proc.stdout
    assert proc.stdout.count("done") == 3, proc.stdout


def test_stall_shutdown_ends_the_job_on_every_rank_with_the_message():
    # The HOROVOD_* alias is accepted; the HVDLITE_* name wins over it.
    proc = run_mpi(3, "workers/core_stall.py", "shutdown",
                   env={"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "500",
                        "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "2"}, timeout=120)
    for rank in range(3):
        line = next((l for l in proc.stdout.splitlines() if l.startswith(f"rank {rank} stopped:")), None)
        assert line, proc.stdout
        assert "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS (2 s)" in line and re.search(STALL, line), line


def _run_frozen(frozen_rank, check_s=10, shutdown_s=20, deadline_s=60):
    """Runs workers/core_stall_frozen.py at 3 ranks; returns (output lines, {rank: wait start},
    {rank: (raised at, message)}, time of the first warning), times from time.monotonic()."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from mpi_launch import HERE, mpi_command, mpi_env

    cmd = ["timeout", "--kill-after=10", str(deadline_s + 30),
           *mpi_command(3, [sys.executable, os.path.join(HERE, "workers/core_stall_frozen.py"),
                            str(frozen_rank)])]
    env = mpi_env({"HVDLITE_STALL_CHECK_TIME_SECONDS": check_s,
                   "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": shutdown_s,
                   "HVDLITE_DEADLOCK_TIME_SECONDS": 0})
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, bufsize=1)
    lines, pids, waits, raised, warned = [], {}, {}, {}, None
    live = {0, 1, 2} - {frozen_rank % 3}
    start = time.monotonic()
    try:
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            m = re.match(r"rank (\d+) (pid|waits|raised) (\S+) ?(.*)", line)
            if m and m.group(2) == "pid":
                pids[int(m.group(1))] = int(m.group(3))
            elif m and m.group(2) == "waits":
                waits[int(m.group(1))] = float(m.group(3))
            elif m:
                raised[int(m.group(1))] = (float(m.group(3)), m.group(4))
            if "warning: stall" in line and warned is None:
                warned = time.monotonic()
            if set(raised) == live or time.monotonic() - start > deadline_s:
                break
    finally:
        for pid in pids.values():  # every rank waits to be killed (see the worker)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            rest, _ = proc.communicate(timeout=30)
            lines += rest.splitlines()
        except subprocess.TimeoutExpired:
            proc.kill()
    return lines, waits, raised, warned


@pytest.mark.parametrize("frozen_rank", [0, 2])
def test_a_frozen_rank_is_warned_about_and_ends_the_job_on_time(frozen_rank):
    # Rank 0 frozen used to give neither warning nor shutdown (it was the coordinator).
    lines, waits, raised, warned = _run_frozen(frozen_rank)
    output = "\n".join(lines)
    live = sorted({0, 1, 2} - {frozen_rank})
    assert sorted(waits) == live, output
    t0 = min(waits.values())
    assert warned is not None and warned - t0 <= 12, (warned and warned - t0, output)
    warning = next(l for l in lines if "warning: stall" in l)
    assert re.search(rf"'fc\.weight' waited \d+ s: ranks {live[0]}, {live[1]} submitted it; "
                     rf"rank {frozen_rank} has not \(rank {frozen_rank} does not answer", warning), warning
    assert sorted(raised) == live, output
    for rank, (at, message) in raised.items():
        assert at - t0 <= 25, (rank, at - t0)
        assert "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS (20 s)" in message, message
