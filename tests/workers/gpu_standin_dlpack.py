"""Framework GPU arrays through DLPack (src/hvdlite/convert/dlpack_arrays.py, Note [DLPack
hand-off without a framework stream]) against the stand-in CUDA runtime: arrays written by
a slow fake kernel on the framework's own stream, one framework ordering them through
``__dlpack__(stream=)`` (as JAX), one only through a device sync (as TensorFlow).

``ok``: both hand-offs give the exact sums, and a consumer kernel queued on the framework's
stream right after the call (no host sync) sees them. ``broken-stream`` / ``broken-sync``: a
framework whose hand-off does nothing: the core must then read stale data (not the sum),
showing that the checks can fail."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
from standins.cuda_array import StandinFramework, StandinRuntime  # noqa: E402

import hvdlite as hvd  # noqa: E402
from worker_checks import count, named_check as check  # noqa: E402
from hvdlite.convert import dlpack_arrays  # noqa: E402

mode = sys.argv[1]
hvd.init()
rank, size = hvd.rank(), hvd.size()
rt = StandinRuntime()


def values(n, dtype, r):
    return (np.arange(n) % 11 + 3 * r + 1).astype(dtype)


if mode == "ok":
    for handoff in ("stream", "sync"):
        fw = StandinFramework(rt, handoff)
        for sizes, dtype in (((1000,), np.float32), ((300_001, 17, 4096), np.float64),
                             ((3_000_000,), np.float32)):  # the last one pipelined
            xs = [fw.array(values(n, dtype, rank)) for n in sizes]
            check(f"{handoff}: takes the arrays", dlpack_arrays.on_one_gpu(xs))
            outs = dlpack_arrays.grouped_allreduce(
                fw, xs, [f"{handoff}.{len(sizes)}.{i}" for i in range(len(sizes))], hvd.Sum,
                1.0, 1.0, None, 0)
            seen = [rt.read_async(o, fw.stream) for o in outs]  # the consumer, no host sync
            rt.sync(fw.stream)
            for n, got in zip(sizes, seen):
                want = sum(values(n, np.float64, r) for r in range(size)).astype(dtype)
                check(f"{handoff}: sum [{n}]", np.array_equal(got, want),
                      f"got {got[:4]} want {want[:4]}")
            for n, x in zip(sizes, xs):
                check(f"{handoff}: input kept [{n}]", np.array_equal(x.numpy(fw.stream),
                                                                     values(n, dtype, rank)))
    hvd.barrier()
    check("no copy of the wrong kind", rt.violations() == "", rt.violations())
    check("every event waited on", rt.unwaited_events() == 0, f"{rt.unwaited_events()} unwaited")
elif mode.startswith("broken-"):
    fw = StandinFramework(rt, mode[len("broken-"):], broken=True)
    x = fw.array(values(1000, np.float32, rank), delay_us=200_000)
    out, = dlpack_arrays.grouped_allreduce(fw, [x], ["stale"], hvd.Sum, 1.0, 1.0, None, 0)
    got = out.numpy(fw.stream)
    want = sum(values(1000, np.float32, r) for r in range(size))
    check(f"stale data without the {mode}", not np.array_equal(got, want), f"got {got[:4]}")
hvd.shutdown()
print(f"rank {rank}: {count()} checks passed", flush=True)
