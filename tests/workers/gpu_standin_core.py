"""CUDA tensors through the core against the stand-in CUDA runtime (tests/gpu/test_standins.py
launches it at 2 and 3 ranks with HVDLITE_CUDA_RUNTIME_LIBRARY pointing at the stand-in and a
copy delay, so that every copy really runs later than it is issued)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
from standins.cuda_array import DeviceArray, StandinRuntime  # noqa: E402

import hvdlite as hvd  # noqa: E402
from worker_checks import count, named_check as check  # noqa: E402
from hvdlite import ops  # noqa: E402
from hvdlite.exceptions import HvdliteInvalidArgumentError, HvdliteMismatchError  # noqa: E402

hvd.init()
rank, size = hvd.rank(), hvd.size()
rt = StandinRuntime()
stream = rt.stream()  # the "framework's current stream"


def values(n, dtype, r):
    return (np.arange(n) % 7 + r + 1).astype(dtype)


# 1. all-reduce, every size and dtype, Sum and Average; the producer is a slow fake kernel
#    on `stream`: hvdlite's copy must wait for it (else it reads zeros).
for dtype in (np.float32, np.float64, np.float16, np.int32):
    for n in (1, 1000, 300_001):
        x = DeviceArray.from_numpy(rt, np.zeros(n, dtype))
        rt.fill_async(x, values(n, dtype, rank), 20_000, stream)
        ops.allreduce_async(x, op=hvd.Sum, stream=stream).wait()
        got = x.numpy(stream)
        want = sum(values(n, np.float64, r) for r in range(size)).astype(dtype)
        check(f"sum {np.dtype(dtype).name}[{n}]", np.array_equal(got, want),
              f"got {got[:5]} want {want[:5]}")
        if dtype != np.int32:
            # out of place, from the inputs again
            rt.fill_async(x, values(n, dtype, rank), 20_000, stream)
            out = DeviceArray(rt, (n,), dtype)
            ops.allreduce_async(x, out, op=hvd.Average, stream=stream).wait()
            got = out.numpy(stream)
            check(f"average {np.dtype(dtype).name}[{n}]",
                  np.allclose(got.astype(np.float64), want.astype(np.float64) / size, rtol=1e-2),
                  f"got {got[:5]} want {want[:5] / size}")
            check(f"average leaves its input {np.dtype(dtype).name}[{n}]",
                  np.array_equal(x.numpy(stream), values(n, dtype, rank)))

# 2. the consumer: after wait(stream), a fake kernel on `stream` reads the result with no
#    host synchronisation in between; it must see the result, not the input.
n = 4096
x = DeviceArray.from_numpy(rt, values(n, np.float32, rank))
ops.allreduce_async(x, op=hvd.Sum, stream=stream).wait()
seen = rt.read_async(x, stream)
rt.sync(stream)
check("consumer ordered after the copy back",
      np.array_equal(seen, sum(values(n, np.float32, r) for r in range(size))))

# 3. device fusion: a group of k tensors is k device-to-device copies in, ONE copy to the
#    host, ONE back, k copies out.
k = 5
xs = [DeviceArray.from_numpy(rt, values(100 + i, np.float32, rank)) for i in range(k)]
before = rt.copies()
ops.grouped_allreduce_async(xs, op=hvd.Sum, stream=stream).wait()
check("device fusion copies", rt.copies() - before == 2 * k + 2, f"{rt.copies() - before}")
for i, t in enumerate(xs):
    check(f"fused member {i}", np.array_equal(
        t.numpy(stream), sum(values(100 + i, np.float32, r) for r in range(size))))

# 4. the other collectives on device tensors.
b = DeviceArray.from_numpy(rt, np.full(33, rank, np.int64))
ops.broadcast_async(b, size - 1, stream=stream).wait()
check("broadcast", np.array_equal(b.numpy(stream), np.full(33, size - 1)))
g = DeviceArray.from_numpy(rt, np.full((rank + 1, 3), rank, np.float32))
res = ops.allgather_async(g, stream=stream).wait()[0].array()
check("allgather", np.array_equal(res, np.concatenate([np.full((r + 1, 3), r, np.float32)
                                                       for r in range(size)])))
a = DeviceArray.from_numpy(rt, np.arange(size * 2, dtype=np.int32) + 100 * rank)
res = ops.alltoall_async(a, stream=stream).wait()[0].array()
check("alltoall", np.array_equal(res, np.concatenate(
    [np.arange(2 * rank, 2 * rank + 2) + 100 * r for r in range(size)])))
rs = DeviceArray.from_numpy(rt, np.ones((size * 2, 4), np.float32) * (rank + 1))
res = ops.reducescatter_async(rs, op=hvd.Sum, stream=stream).wait()[0].array()
check("reducescatter", np.array_equal(res, np.full((2, 4), sum(range(1, size + 1)), np.float32)))

# 5. the synchronous path (the caller drives the rounds) and the host-waiting default.
x = DeviceArray.from_numpy(rt, values(10, np.float32, rank))
ops.allreduce(x, op=hvd.Sum, stream=stream)
check("synchronous allreduce", np.array_equal(x.numpy(stream),
                                              sum(values(10, np.float32, r) for r in range(size))))
x = DeviceArray.from_numpy(rt, values(10, np.float32, rank))
ops.allreduce_async(x, op=hvd.Sum).wait()  # no stream: legacy default in, host waits
check("default stream", np.array_equal(x.numpy(), sum(values(10, np.float32, r) for r in range(size))))

# 6. a process set (not the global one).
members = [0] if size == 2 else [0, 1]
ps = hvd.add_process_set(members)
if rank in members:
    x = DeviceArray.from_numpy(rt, values(50, np.float32, rank))
    ops.allreduce_async(x, op=hvd.Sum, process_set=ps, stream=stream).wait()
    check("process set", np.array_equal(x.numpy(stream),
                                        sum(values(50, np.float32, r) for r in members)))
hvd.remove_process_set(ps)

# 7. errors: a mismatch leaves the tensor as it was, on every rank; a wrong device is named.
x = DeviceArray.from_numpy(rt, np.ones(10 + rank, np.float32))
try:
    ops.allreduce_async(x, name="mismatched", stream=stream).wait()
    check("mismatch raised", size == 1)
except HvdliteMismatchError as e:
    check("mismatch names the tensor", "mismatched" in str(e), str(e))
    check("mismatch leaves the input", np.array_equal(x.numpy(stream), np.ones(10 + rank)))
host = np.zeros(4, np.float32)
try:
    ops.allreduce_async(DeviceArray.from_numpy(rt, host), host, stream=stream).wait()
    check("device/host mix refused", False)
except HvdliteInvalidArgumentError as e:
    check("device/host mix named", "CUDA device 0" in str(e) and "host memory" in str(e), str(e))

rt.sync(stream)
hvd.barrier()
check("no copy of the wrong kind", rt.violations() == "", rt.violations())
check("every event waited on", rt.unwaited_events() == 0, f"{rt.unwaited_events()} unwaited")
hvd.shutdown()
print(f"rank {rank}: {count()} checks passed", flush=True)
