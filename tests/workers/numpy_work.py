"""hvdlite's numpy API on Work objects: int handles, groups, orphans, grouped allgather /
reducescatter, object collectives, callbacks when done. Run by tests/test_numpy_api.py at 2 and 3 ranks."""
import gc
import threading
import time

import numpy as np

import hvdlite as hvd
from hvdlite import completions
from hvdlite import work as _work

hvd.init()
R, N = hvd.rank(), hvd.size()

# A Work is Horovod's int handle too; a group is one Work whose poll covers every member.
w = hvd.grouped_allreduce_async([np.ones(3) * R, np.ones(2)], op=hvd.Sum, name="g")
h = int(w)
assert isinstance(h, int) and int(w) == h
while not hvd.poll(h):
    pass
out = hvd.synchronize(h)
assert np.array_equal(out[0], np.full(3, N * (N - 1) / 2)) and np.array_equal(out[1], np.full(2, N))
try:
    hvd.synchronize(h)
except hvd.HvdliteInvalidArgumentError as e:
    assert "unknown handle" in str(e)
else:
    raise AssertionError("a synchronized handle was accepted again")
assert hvd.synchronize(hvd.grouped_allreduce_async([])) == []       # no -1 sentinel

# grouped allgather / reducescatter
a, b = hvd.grouped_allgather([np.full((R + 1, 2), R, np.int32), np.array([R], np.float32)])
assert a.shape == (N * (N + 1) // 2, 2) and b.tolist() == list(range(N))
rows = 2 * N + 1
rs = hvd.grouped_reducescatter([np.ones((rows, 2)), np.ones(N)], op=hvd.Sum)
assert rs[0].shape == (rows // N + (R < rows % N), 2) and np.all(rs[0] == N) and rs[1].tolist() == [N]

# Outputs the caller gives (Note [outputs the caller gives]): the results land there and the
# Work carries none; a wrong-sized output fails on its rank only, left untouched.
from hvdlite import ops  # noqa: E402

gathered = np.full((2 * N, 3), -1.0, np.float32)
res = ops.grouped_allgather_async([np.full((2, 3), R, np.float32)], outputs=[gathered]).wait()
assert res[0].output is None and gathered[:, 0].tolist() == [r for r in range(N) for _ in (0, 1)]
share = np.full((2, 3), -1.0)
ops.grouped_reducescatter_async([np.ones((2 * N, 3))], op=hvd.Sum, prescale_factor=2.0,
                                outputs=[share]).wait()
assert share.tolist() == [[2.0 * N] * 3] * 2, share
small = np.full((1, 3), -1.0, np.float32)
try:
    ops.grouped_allgather_async([np.full((2, 3), R, np.float32)], outputs=[small]).wait()
except hvd.HvdliteInvalidArgumentError as e:
    assert "holds 12 bytes, but this rank's result is" in str(e) and small.min() == -1, e
else:
    raise AssertionError("a wrong-sized output was accepted")
try:
    ops.grouped_allgather_async([np.ones(2, np.float32)], outputs=[np.zeros(2 * N)])
except hvd.HvdliteInvalidArgumentError as e:
    assert "output is float64 but input is float32" in str(e), e
else:
    raise AssertionError("an output of another dtype was accepted")

# A Work dropped before completion keeps its arrays until the core is done, then frees all.
for i in range(20):
    hvd.allreduce_async(np.ones(1000) * i, name=f"dropped.{i}")
gc.collect()
hvd.barrier()
for _ in range(3):
    hvd.allreduce(np.ones(1), name="reap")   # a new Work reaps finished orphans
assert not _work._orphans, len(_work._orphans)

# A failing member: every member is waited for, the error names the tensor.
try:
    hvd.grouped_allreduce([np.ones(2), np.ones(R + 2)], name="bad")
except hvd.HvdliteMismatchError as e:
    assert "bad.1" in str(e)
else:
    raise AssertionError("mismatch not raised")

# when_done: callbacks without a waiter, each once, on the completion thread, in the order
# the requests finish; a failed member's error reaches the callback's wait(); a done Work
# calls back at once. Rank 0 submits "late" first, but it finishes last.
calls, seen = [], threading.Event()


def record(work, label):
    def callback():
        try:
            calls.append((label, work.wait().tolist(), threading.current_thread().name))
        except hvd.HvdliteError as e:
            calls.append((label, type(e).__name__, threading.current_thread().name))
        seen.set()
    work.when_done(callback)


if R == 0:
    late = hvd.allreduce_async(np.full(2, 1.0), op=hvd.Sum, name="late")
    record(late, "late")
    early = hvd.allreduce_async(np.full(2, 2.0), op=hvd.Sum, name="early")
    record(early, "early")
    hvd.barrier()
else:
    early = hvd.allreduce_async(np.full(2, 2.0), op=hvd.Sum, name="early")
    record(early, "early")
    hvd.barrier()
    time.sleep(0.3)
    late = hvd.allreduce_async(np.full(2, 1.0), op=hvd.Sum, name="late")
    record(late, "late")
group = hvd.grouped_allreduce_async([np.ones(2), np.ones(R + 2)], name="bad_cb")
record(group, "bad")
deadline = time.monotonic() + 30
while len(calls) < 3 and time.monotonic() < deadline:
    seen.wait(0.1)
    seen.clear()
labels = [c[0] for c in calls]
assert labels in (["early", "late", "bad"], ["early", "bad", "late"]), calls  # one round: either
assert ("early", [2.0 * N] * 2, "hvdlite-completions") in calls, calls
assert ("late", [1.0 * N] * 2, "hvdlite-completions") in calls, calls
assert ("bad", "HvdliteMismatchError", "hvdlite-completions") in calls, calls
done_now = []
late.when_done(lambda: done_now.append(threading.current_thread().name))
assert done_now == [threading.current_thread().name], done_now
deadline = time.monotonic() + 10
while completions._thread is not None and time.monotonic() < deadline:
    time.sleep(0.05)
assert completions._thread is None, "the completion thread outlived its last callback"

# objects
assert hvd.broadcast_object({"r": R} if R == N - 1 else None, root_rank=N - 1) == {"r": N - 1}
assert hvd.allgather_object(R * "x") == [r * "x" for r in range(N)]
print(f"numpy_work: rank {R} OK", flush=True)
