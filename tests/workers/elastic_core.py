"""Core elastic recovery with process sets (numpy API, no framework), at 3 ranks.

Sets: A = ranks {0, 2}, B = ranks {1, 2}. Rank 1 is killed while every rank has an
all-reduce pending; each survivor's pending request must fail with HvdliteRanksLostError,
and after hvdlite's rebuild the world is {old 0, old 2} = new {0, 1}, A keeps its id with
ranks [0, 1], B keeps its id with rank [1] only, and collectives in all of them are exact.
Point-to-point too: a receive from rank 1 pending at the loss fails with the same error, and
after the rebuild sends and receives work on the rebuilt world and sets.
"""
import os
import signal

import numpy as np

import hvdlite as hvd
from hvdlite import _core, p2p

hvd.init(process_sets="dynamic")
old = hvd.rank()
a = hvd.add_process_set([0, 2])
b = hvd.add_process_set([1, 2])
x = hvd.allreduce(np.array([float(old + 1)]), op=hvd.Sum, name="before")
assert x[0] == 6.0, x

from_lost = p2p.recv_async(np.zeros(4), src=1, tag=7) if old == 0 else None
if old == 1:
    os.kill(os.getpid(), signal.SIGKILL)
try:
    hvd.allreduce(np.array([1.0]), op=hvd.Sum, name="pending")
    raise AssertionError(f"rank {old}: the all-reduce with a dead rank succeeded")
except hvd.HvdliteRanksLostError as e:
    assert "a rank of the job was lost" in str(e), e

if from_lost is not None:
    try:
        from_lost.wait(timeout=60)
        raise AssertionError("the receive from the lost rank succeeded")
    except hvd.HvdliteRanksLostError as e:
        assert "recv from rank 1 (tag 7)" in str(e), e

lost = _core.rebuild()
assert lost == [1], lost
hvd.process_sets.refresh_after_rebuild()
assert a.ranks == [0, 1] and b.ranks == [1], (a.ranks, b.ranks)
assert hvd.size() == 2 and hvd.rank() == {0: 0, 2: 1}[old], (old, hvd.rank())
assert _core.process_set_ranks(a.process_set_id) == [0, 1]
assert _core.process_set_ranks(b.process_set_id) == [1]
y = hvd.allreduce(np.array([float(old + 1)]), op=hvd.Sum, name="after")
assert y[0] == 4.0, y
z = hvd.allreduce(np.array([float(old + 1)]), op=hvd.Sum, name="in_a", process_set=a)
assert z[0] == 4.0, z
if old == 2:
    w = hvd.allreduce(np.array([5.0]), op=hvd.Sum, name="in_b", process_set=b)
    assert w[0] == 5.0, w
sent = np.arange(5, dtype=np.float32) * (old + 1)
if hvd.rank() == 0:
    p2p.send_async(sent, dst=1, tag=3).wait(timeout=60)
    got = np.zeros(3)
    assert p2p.recv_async(got, src=1, tag=4, process_set=a).wait(timeout=60) == 1
    assert got.tolist() == [2.0] * 3, got
else:
    got = np.zeros(5, np.float32)
    assert p2p.recv_async(got, src=None, tag=3).wait(timeout=60) == 0
    assert got.tolist() == [0, 1, 2, 3, 4], got
    p2p.send_async(np.full(3, float(old)), dst=0, tag=4, process_set=a).wait(timeout=60)
g = hvd.allgather(np.array([old]), name="gather")
assert g.tolist() == [0, 2], g
print(f"rank {old} recovered as {hvd.rank()} of {hvd.size()}", flush=True)
