"""Waits through shared memory sleep until a peer rings (Note [doorbell] in
csrc/transport/shm_doorbell.h), at 2 ranks (the swap) and 3 (the board), and never sleep with
HVDLITE_SHM_SLEEP_AFTER_US=0. A peer lost during such a sleep: tests/test_elastic.py's
shared-memory case. C++ unit tests, sides as threads: csrc/tests/test_shm_doorbell.cc."""
import pytest

from mpi_launch import run_mpi


@pytest.mark.parametrize("np_", [2, 3])
@pytest.mark.parametrize("mode", ["sleeps", "never"])
def test_waits_for_a_late_rank_sleep_unless_told_not_to(np_, mode):
    env = {"HVDLITE_SHM_SLEEP_AFTER_US": "0"} if mode == "never" else {}
    out = run_mpi(np_, "workers/shm_doorbell.py", mode, env=env, timeout=300).stdout
    assert f"shm_doorbell OK at {np_} ranks ({mode})" in out, out
