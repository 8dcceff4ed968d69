"""Large shared-memory all-reduces in lanes (csrc/algorithms/shm_lanes.h) at 2 and 3 ranks,
oversubscribed on a 2-core machine (each lane's waits must yield): exact sums, the lanes
counted for the large all-reduces only, and Average bitwise the same as with one lane, idle
lanes (HVDLITE_SHM_IDLE_LANES) too. C++
unit tests, ranks and lanes as threads: csrc/tests/test_shm_lanes.cc."""
import re

import pytest

from mpi_launch import run_mpi


def average_digests(np_, lanes, idle=False):
    env = {"HVDLITE_SHM_LANES": str(lanes), "HVDLITE_SHM_IDLE_LANES": "1" if idle else "0"}
    out = run_mpi(np_, "workers/shm_lanes.py", lanes, env=env, timeout=300).stdout
    assert f"shm_lanes OK at {np_} ranks, {lanes} lanes" in out, out
    digests = set(re.findall(r"average digest ([0-9a-f]+)", out))
    assert len(digests) == 1, out
    return digests.pop()


@pytest.mark.parametrize("np_", [2, 3])
def test_lanes_give_the_one_lane_bits(np_):
    assert average_digests(np_, 3) == average_digests(np_, 1)


def test_idle_lanes_give_the_one_lane_bits():
    # HVDLITE_SHM_IDLE_LANES=1: the lane threads run under SCHED_IDLE (the worker checks
    # their policy in /proc), on a machine whose cores the ranks already fill.
    assert average_digests(3, 3, idle=True) == average_digests(3, 1)
