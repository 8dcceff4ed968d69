"""The hvdlite group's timeout (Note [group timeouts] in src/hvdlite/c10d/calls.py), at 2
ranks: a barrier only rank 0 calls ends after the group's timeout with a GroupTimeoutError (a
DistBackendError, "Timed out waiting 2000ms"), its request still in flight, so rank 1's late
barrier completes it and the group goes on; a call's own timeout (barrier(timeout=...)) and
Work.wait(timeout=...) win over the group's; a coalescing block's Work keeps the group's."""
import datetime
import time

import torch

torch.set_num_threads(1)

import torch.distributed as dist  # noqa: E402

import hvdlite.torch.distributed as hvd_dist  # noqa: E402
from worker_checks import check, expect_error  # noqa: E402

hvd_dist.init_process_group(timeout=datetime.timedelta(seconds=2))
R, N = dist.get_rank(), dist.get_world_size()


def all_reduce_ok(label):
    t = torch.ones(4)
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((4,), float(N))), f"{label}: all_reduce after it")


# 1. The group's timeout: rank 0's barrier waits 2 s for rank 1, which comes at 3.5 s.
if R == 0:
    start = time.monotonic()
    msg = expect_error(dist.DistBackendError, dist.barrier,
                       ["barrier (call 0 of group", "Timed out waiting 2000ms",
                        "still in flight"], "the group's timeout")
    took = time.monotonic() - start
    check(1.9 < took < 3.4, f"the group's timeout ended the wait after {took:.2f} s")
else:
    time.sleep(3.5)
    dist.barrier()   # completes rank 0's barrier, still in flight
all_reduce_ok("group timeout")

# 2. A call's own timeout wins: 0.5 s.
if R == 0:
    start = time.monotonic()
    expect_error(hvd_dist.GroupTimeoutError,
                 lambda: dist.barrier(timeout=datetime.timedelta(seconds=0.5)),
                 ["Timed out waiting 500ms"], "barrier(timeout=0.5 s)")
    took = time.monotonic() - start
    check(0.4 < took < 1.9, f"the call's timeout ended the wait after {took:.2f} s")
else:
    time.sleep(2.5)
    dist.barrier()
all_reduce_ok("call timeout")

# 3. An async Work: wait(timeout=...) wins; waited again, it finishes once rank 1 comes.
t = torch.full((2,), float(R + 1))
if R == 0:
    work = dist.all_reduce(t, async_op=True)
    expect_error(RuntimeError, lambda: work.wait(timeout=datetime.timedelta(seconds=0.3)),
                 ["Timed out waiting 300ms"], "Work.wait(timeout=0.3 s)")
    work.wait()
else:
    time.sleep(1.0)
    dist.all_reduce(t)
check(torch.equal(t, torch.full((2,), float(N * (N + 1) / 2))), "the timed-out all-reduce's result")
all_reduce_ok("async")

# 4. A coalescing block's Work: the group's timeout bounds its wait() as any other's.
pg = dist.distributed_c10d._get_default_group()
cpu = torch.device("cpu")
ts = [torch.full((3,), float(R + 1)), torch.full((5,), float(R + 1))]
if R == 0:
    pg._start_coalescing(cpu)
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    block = pg._end_coalescing(cpu)
    expect_error(hvd_dist.GroupTimeoutError, block.wait, ["Timed out waiting 2000ms"],
                 "a coalescing block's wait()")
    block.wait(timeout=datetime.timedelta(seconds=60))
else:
    time.sleep(3.0)
    for t in ts:
        dist.all_reduce(t)
for t in ts:
    check(torch.equal(t, torch.full(t.shape, float(N * (N + 1) / 2))), "the coalesced all-reduces' results")
all_reduce_ok("coalesced")
dist.destroy_process_group()
print(f"c10d timeout ok on rank {R}", flush=True)
