"""hvdlite's numpy API on Work objects: int handles, groups, orphans, grouped allgather /
reducescatter, object collectives. Run by tests/test_numpy_api.py at 2 and 3 ranks."""
import gc

import numpy as np

import hvdlite as hvd
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

# objects
assert hvd.broadcast_object({"r": R} if R == N - 1 else None, root_rank=N - 1) == {"r": N - 1}
assert hvd.allgather_object(R * "x") == [r * "x" for r in range(N)]
print(f"numpy_work: rank {R} OK", flush=True)
