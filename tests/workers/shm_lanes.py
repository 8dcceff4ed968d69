"""Large all-reduces through shared memory in lanes (csrc/algorithms/shm_lanes.h).

argv[1]: the lanes HVDLITE_SHM_LANES asked for (the launch sets it). Inputs are small
integers, so sums are exact in any order; Average's bits must be the same on every rank and
the same as with one lane (each element keeps its owner and the ring's operand order). The
transport's counters show the lanes ran for the large all-reduces only. With
HVDLITE_SHM_IDLE_LANES=1, the lane threads (lanes - 1 of them) run under SCHED_IDLE, and
no other thread of the process does.
"""
import hashlib
import os
import sys

import numpy as np

import hvdlite as hvd
from hvdlite import _core

lanes = int(sys.argv[1])
hvd.init()
R, N = hvd.rank(), hvd.size()
LANE_MIN = 4 << 20


def inputs(r, count, dtype, seed):
    return np.random.default_rng(seed * 100 + r).integers(-4, 5, size=count).astype(dtype)


seed = 0
for dtype in (np.float32, np.float64, np.int32, np.float16):
    for count in (1000, LANE_MIN // np.dtype(dtype).itemsize + 12345):
        seed += 1
        xs = [inputs(r, count, dtype, seed) for r in range(N)]
        _core.transport_stats(reset=True)
        got = hvd.allreduce(xs[R], op=hvd.Sum, name=f"{np.dtype(dtype).name}.{count}")
        s = _core.transport_stats(reset=True)
        want = np.sum(np.stack(xs), axis=0).astype(dtype)
        assert np.array_equal(got, want), (dtype, count)
        assert s["shared_memory_allreduces"] == 1, s
        large = count * np.dtype(dtype).itemsize >= LANE_MIN
        assert s["shared_memory_extra_lanes"] == (lanes - 1 if large else 0), (lanes, count, s)

SCHED_IDLE = 5


def threads_under_sched_idle():
    """Threads of this process whose scheduling policy (field 41 of /proc/self/task/T/stat)
    is SCHED_IDLE."""
    found = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found += int(fields[41 - 3]) == SCHED_IDLE  # fields after "pid (comm)" start at 3
    return found


if os.environ.get("HVDLITE_SHM_IDLE_LANES") == "1":
    assert threads_under_sched_idle() == lanes - 1, (threads_under_sched_idle(), lanes)
else:
    assert threads_under_sched_idle() == 0, threads_under_sched_idle()

# Average of random floats: every rank holds the same bits, and its digest must equal the
# one a launch with one lane prints (tests/test_shm_lanes.py compares them).
count = LANE_MIN // 4 + 999
x = np.random.default_rng(7 + R).standard_normal(count).astype(np.float32)
lanes_result = hvd.allreduce(x, op=hvd.Average, name="average.lanes")
gathered = hvd.allgather(lanes_result[None, :], name="average.bits")
assert all(np.array_equal(gathered[0].view(np.uint32), g.view(np.uint32)) for g in gathered), "ranks differ"
print(f"rank {R}: average digest {hashlib.sha256(lanes_result.tobytes()).hexdigest()}", flush=True)
if R == 0:
    print(f"shm_lanes OK at {N} ranks, {lanes} lanes", flush=True)
