"""Hierarchical all-reduce of CUDA tensors with NCCL (tests/gpu/test_standins_multihost.py):
on 2 or 3 (network-namespace) hosts of 2 ranks each, against the stand-in CUDA runtime and
NCCL, with HVDLITE_GPU_OPERATIONS=nccl and HVDLITE_HIERARCHICAL_ALLREDUCE=1. NCCL reduces
within each host on a communicator of that host's ranks only (the stand-in's communicators
live in the host's shared memory, so a communicator spanning hosts could not even form), MPI
across hosts: results exact at every size, dtype and op, fused groups included."""
import ctypes
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
from standins.cuda_array import DeviceArray, StandinRuntime  # noqa: E402

import hvdlite as hvd  # noqa: E402
from hvdlite import _core, ops  # noqa: E402

hvd.init()
rank, size, local_size = hvd.rank(), hvd.size(), hvd.local_size()
rt = StandinRuntime()
nccl = ctypes.CDLL(os.environ["HVDLITE_NCCL_LIBRARY"])
stream = rt.stream()
checks = 0


def check(name, cond, detail=""):
    global checks
    if not cond:
        raise AssertionError(f"rank {rank}: {name} failed {detail}")
    checks += 1


def values(n, dtype, r):
    return (np.arange(n) % 7 + r + 1).astype(dtype)


check("more than one host", hvd.cross_size() > 1 and local_size > 1, f"{hvd.cross_size()} x {local_size}")
for dtype in (np.float32, np.float64, np.float16, np.int32, np.int64):
    for n in (1, 3, 1001, 300_001):  # below, at and above the host's rank count; padded shards
        x = DeviceArray.from_numpy(rt, values(n, dtype, rank))
        ops.allreduce_async(x, op=hvd.Sum, stream=stream).wait()
        want = sum(values(n, np.int64, r) for r in range(size)).astype(dtype)
        check(f"sum {np.dtype(dtype).name}[{n}]", np.array_equal(x.numpy(stream), want))
for op, fn in ((hvd.Min, np.minimum.reduce), (hvd.Max, np.maximum.reduce), (hvd.Average, None),
               (hvd.Product, np.multiply.reduce)):
    x = DeviceArray.from_numpy(rt, values(50, np.float64, rank))
    ops.allreduce_async(x, op=op, stream=stream).wait()
    per_rank = [values(50, np.float64, r) for r in range(size)]
    want = fn(per_rank) if fn else sum(per_rank) / size
    check(f"op {op}", np.allclose(x.numpy(stream), want, rtol=1e-12))
xs = [DeviceArray.from_numpy(rt, values(100 + 7 * i, np.float32, rank)) for i in range(5)]
ops.grouped_allreduce_async(xs, op=hvd.Sum, stream=stream).wait()
for i, t in enumerate(xs):
    check(f"grouped {i}", np.array_equal(t.numpy(stream), sum(values(100 + 7 * i, np.float32, r) for r in range(size))))
ran = _core.nccl_requests_run()["allreduce"]
check("on NCCL", ran >= 26, str(ran))
# One communicator, of this host's ranks: the set's own (across hosts) was never needed.
check("one communicator, within the host", nccl.standin_nccl_comms() == 1, str(nccl.standin_nccl_comms()))
check("of this host's ranks", nccl.standin_nccl_last_comm_ranks() == local_size < size,
      f"{nccl.standin_nccl_last_comm_ranks()} of {size}")
check("every event waited on", rt.unwaited_events() == 0, str(rt.unwaited_events()))
hvd.shutdown()
print(f"rank {rank}: {checks} checks passed: ALL OK", flush=True)
