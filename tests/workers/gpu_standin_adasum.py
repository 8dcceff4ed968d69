"""CUDA tensors with op=Adasum, against the stand-in CUDA runtime and NCCL (tests/test_adasum.py
launches it with a stand-in GPU per rank, so NCCL is the default path): Adasum is no NCCL
reduction, so its CUDA tensors are staged through host memory and reduced by the core's CPU
algorithm over all ranks (Horovod's behaviour when built without NCCL), against the float64
reference; a fused group; the producer's stream ordered before the copy, the consumer's after."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
from standins.cuda_array import DeviceArray, StandinRuntime  # noqa: E402

import hvdlite as hvd  # noqa: E402
from adasum_reference import adasum_tree, relative_error, tolerance  # noqa: E402
from hvdlite import ops  # noqa: E402
from worker_checks import count, named_check as check  # noqa: E402

hvd.init()
rank, size = hvd.rank(), hvd.size()
rt = StandinRuntime()
stream = rt.stream()
EPS = {np.float16: 2.0 ** -10, np.float32: 2.0 ** -23, np.float64: 2.0 ** -52}


def everyone(n, dtype, seed):
    rng = np.random.default_rng(seed)
    shared = rng.normal(size=n)
    return [(shared * (r + 1) + rng.normal(size=n)).astype(dtype) for r in range(size)]


for dtype in (np.float32, np.float64, np.float16):
    for n in (1, 1000, 300_001):
        inputs = everyone(n, dtype, n)
        x = DeviceArray.from_numpy(rt, np.zeros(n, dtype))
        rt.fill_async(x, inputs[rank], 20_000, stream)   # a slow producer on the stream
        ops.allreduce_async(x, op=hvd.Adasum, stream=stream).wait()
        err = relative_error(x.numpy(stream), adasum_tree(inputs))
        check(f"adasum {np.dtype(dtype).name}[{n}]", err <= tolerance(EPS[dtype], size),
              f"error {err}")

sizes = [100, 7, 5000]
groups = [everyone(k, np.float32, 100 + k) for k in sizes]
xs = [DeviceArray.from_numpy(rt, g[rank]) for g in groups]
ops.grouped_allreduce_async(xs, op=hvd.Adasum, stream=stream).wait()
for k, (t, g) in enumerate(zip(xs, groups)):
    err = relative_error(t.numpy(stream), adasum_tree(g))
    check(f"fused adasum member {k}", err <= tolerance(EPS[np.float32], size), f"error {err}")

rt.sync(stream)
hvd.barrier()
check("no copy of the wrong kind", rt.violations() == "", rt.violations())
check("every event waited on", rt.unwaited_events() == 0, f"{rt.unwaited_events()} unwaited")
hvd.shutdown()
print(f"rank {rank}: {count()} checks passed", flush=True)
