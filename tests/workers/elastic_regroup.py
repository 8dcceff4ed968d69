"""Core elastic resizing (numpy API, no framework): 2 ranks take in a third, then one leaves.

Ranks 0 and 1 start; together they call _core.regroup to start rank 2 (MPI_Comm_spawn, run
under hvdlite-run's guard as the launcher would) and merge with it: every rank then
all-reduces at 3. Then rank 1 leaves (MPI_Comm_split): ranks 0 and 2 go on as 0 and 1 of 2,
and rank 1 exits without MPI_Finalize. Rank 0 prints the times of both changes. Adding a rank
while a process set exists is refused first, on both ranks, and the job stays usable.
"""
import os
import sys
import time

import numpy as np

import hvdlite as hvd
from hvdlite import _core
from hvdlite.contract import elastic_env as settings
from hvdlite.runner import launch

hvd.init(process_sets="dynamic")
added = settings.added_worker_id()
me = added if added is not None else hvd.rank()
if added is None:
    assert hvd.size() == 2, hvd.size()
    command = [sys.executable, "-S", "-E", launch.GUARD, sys.executable, os.path.abspath(__file__)]
    env = [f"{settings.WORKER_ID_ENV}=2", f"{settings.HOST_ENV}=localhost"]
    odd = hvd.add_process_set([1])
    try:
        _core.regroup([], command, [(env, "")])
        raise AssertionError("regroup added a rank to a job with a process set")
    except hvd.HvdliteInvalidArgumentError as e:
        assert "cannot add ranks to a job with process sets" in str(e), e
    hvd.remove_process_set(odd)
    started = time.perf_counter()
    assert _core.regroup([], command, [(env, "")])
    if me == 0:
        print(f"added a rank in {time.perf_counter() - started:.3f} s", flush=True)
assert hvd.size() == 3 and hvd.rank() == me, (me, hvd.size(), hvd.rank())
total = hvd.allreduce(np.array([float(me + 1)]), op=hvd.Sum, name="at_three")
assert total[0] == 6.0, total
g = hvd.allgather(np.array([me]), name="who")
assert g.tolist() == [0, 1, 2], g

started = time.perf_counter()
if not _core.regroup([1], [], []):
    assert me == 1
    print(f"rank {me} left", flush=True)
    sys.stdout.flush()
    os._exit(0)
assert hvd.size() == 2 and hvd.rank() == {0: 0, 2: 1}[me], (me, hvd.size(), hvd.rank())
if me == 0:
    print(f"removed a rank in {time.perf_counter() - started:.3f} s", flush=True)
total = hvd.allreduce(np.array([float(me + 1)]), op=hvd.Sum, name="at_two")
assert total[0] == 4.0, total
print(f"rank {me} finished as {hvd.rank()} of {hvd.size()}", flush=True)
