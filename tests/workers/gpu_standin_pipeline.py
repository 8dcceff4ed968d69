"""Pipelined staging (Note [pipelined staging] in csrc/device/staging.h) against the stand-in
CUDA runtime, at 2 ranks; tests/gpu/test_standins.py runs it with and without pieces.

``check``: all-reduces of CUDA arrays whose staging and reduction go in uneven pieces (the
piece size is no multiple of the 256-byte alignment or of the tensors); prints a digest of
every result, which must be bitwise that of the run in one piece, and checks the exact ones.
``time``: the median wall time of a 16 MiB all-reduce of a CUDA array, and of the same
all-reduce of a host array (the host reduction alone)."""
import hashlib
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
from standins.cuda_array import DeviceArray, StandinRuntime  # noqa: E402

import hvdlite as hvd  # noqa: E402
from worker_checks import count, named_check as check  # noqa: E402
from hvdlite import _core, ops  # noqa: E402

mode = sys.argv[1]
hvd.init()
rank, size = hvd.rank(), hvd.size()
assert size == 2, "pieces are used at 2 ranks"
rt = StandinRuntime()
stream = rt.stream()  # the "framework's current stream"


def data(n, dtype, r, seed):
    g = np.random.default_rng(1000 * seed + r)
    if np.dtype(dtype).kind == "i":
        return g.integers(-1000, 1000, n).astype(dtype)
    return g.standard_normal(n).astype(dtype)


if mode == "check":
    digest = hashlib.sha256()
    # (dtypes and sizes of one grouped submission, op, prescale, out of place)
    cases = [
        ([(np.float32, 1_000_003)], hvd.Sum, 1.0, False),
        ([(np.float64, 700_001)], hvd.Average, 1.0, True),
        ([(np.float32, 100), (np.float32, 300_000), (np.float32, 17), (np.float32, 500_001)],
         hvd.Sum, 1.0, False),
        ([(np.float16, 2_000_001)], hvd.Average, 1.0, False),
        ([(np.float32, 1_000_000)], hvd.Sum, 0.5, False),
        ([(np.int32, 1_000_000), (np.int32, 33_333)], hvd.Sum, 1.0, True),
        # 10 MB: two pieces of at least 4 MiB where pieces are 4.5 MiB, each reduced in lanes
        # where HVDLITE_SHM_LANES asks for them (tests/gpu/test_standins.py)
        ([(np.float32, 2_600_001)], hvd.Sum, 1.0, False),
    ]
    for seed, (specs, op, prescale, out_of_place) in enumerate(cases):
        label = f"case {seed} {[(np.dtype(d).name, n) for d, n in specs]}"
        xs = []
        for d, n in specs:
            x = DeviceArray.from_numpy(rt, np.zeros(n, d))
            # the producer: a slow fake kernel on `stream`; the staging must wait for it
            rt.fill_async(x, data(n, d, rank, seed), 20_000, stream)
            xs.append(x)
        outs = [DeviceArray(rt, x.shape, x.dtype) for x in xs] if out_of_place else None
        ops.grouped_allreduce_async(xs, outs, op=op, prescale_factor=prescale,
                                    stream=stream).wait()
        # the consumer: a fake kernel on `stream`, no host synchronisation before it
        seen = [rt.read_async(o, stream) for o in (outs or xs)]
        rt.sync(stream)
        for (d, n), got in zip(specs, seen):
            digest.update(got.tobytes())
            if op == hvd.Sum and prescale == 1.0:  # one addition per element: exact
                want = data(n, d, 0, seed) + data(n, d, 1, seed)
                check(f"{label} exact", np.array_equal(got, want.astype(d)),
                      f"first difference at {np.flatnonzero(got != want)[:3]}")
            else:
                want = (data(n, np.float64, 0, seed) + data(n, np.float64, 1, seed))
                want = want * (prescale if op == hvd.Sum else 0.5)
                check(f"{label} close", np.allclose(got.astype(np.float64), want,
                                                    rtol=1e-2, atol=1e-2))
        if out_of_place:
            for (d, n), x in zip(specs, xs):
                check(f"{label} input kept", np.array_equal(x.numpy(stream), data(n, d, rank, seed)))
    # Host arrays take the same pieces (the choice must not depend on where tensors live).
    for dtype in (np.float32, np.float16):
        h = data(1_000_003, dtype, rank, 99)
        ops.allreduce_async(h, op=hvd.Average).wait()
        digest.update(h.tobytes())
    rt.sync(stream)
    hvd.barrier()
    check("no copy of the wrong kind", rt.violations() == "", rt.violations())
    check("every event waited on", rt.unwaited_events() == 0, f"{rt.unwaited_events()} unwaited")
    print(f"rank {rank}: digest {digest.hexdigest()}", flush=True)
    print(f"rank {rank}: extra lanes {_core.transport_stats()['shared_memory_extra_lanes']}", flush=True)
elif mode == "time":
    n = (16 << 20) // 4
    x = DeviceArray.from_numpy(rt, data(n, np.float32, rank, 0))
    h = data(n, np.float32, rank, 0)

    def timed(fn, reps=3):
        fn()  # warm: buffers allocated
        times = []
        for _ in range(reps):
            hvd.barrier()
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return 1e3 * float(np.median(times))

    def device():
        ops.allreduce_async(x, op=hvd.Sum, stream=stream).wait(); rt.sync(stream)

    def host():
        ops.allreduce_async(h, op=hvd.Sum).wait()

    print(f"rank {rank}: device_ms {timed(device):.1f} host_ms {timed(host):.1f}", flush=True)
    check("every event waited on", rt.unwaited_events() == 0, f"{rt.unwaited_events()} unwaited")
hvd.shutdown()
print(f"rank {rank}: {count()} checks passed", flush=True)
