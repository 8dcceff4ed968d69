"""CUDA tensors over NCCL, against the stand-in CUDA runtime and NCCL (tests/gpu/
test_standins.py; each rank has a stand-in GPU of its own). argv[1]: "ok" runs the checks,
"mpi" checks that HVDLITE_GPU_OPERATIONS=mpi keeps NCCL out, "error" checks that an NCCL
failure on one rank (injected by the stand-in) becomes an hvdlite error on every rank,
"propagate" that the peers learn it from that rank (not from their own NCCL), and
"rebuild" that after it an elastic rebuild gives NCCL collectives a fresh communicator."""
import ctypes
import gc
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu"))
from standins.cuda_array import DeviceArray, StandinRuntime  # noqa: E402

import hvdlite as hvd  # noqa: E402
from worker_checks import count, named_check as check  # noqa: E402
from hvdlite import _core, ops  # noqa: E402
from hvdlite.exceptions import HvdliteError  # noqa: E402

mode = sys.argv[1]
hvd.init()
rank, size = hvd.rank(), hvd.size()
rt = StandinRuntime()
nccl = ctypes.CDLL(os.environ["HVDLITE_NCCL_LIBRARY"])
nccl.standin_nccl_collectives.restype = ctypes.c_long
stream = rt.stream()
dev = rank  # one stand-in GPU per rank (CUDA_STANDIN_DEVICES)


def values(n, dtype, r):
    return (np.arange(n) % 7 + r + 1).astype(dtype)


def collectives():
    return nccl.standin_nccl_collectives()


def arr(v):
    return DeviceArray.from_numpy(rt, v, device=dev)


if mode == "mpi":
    x = arr(values(100, np.float32, rank))
    ops.allreduce_async(x, op=hvd.Sum, stream=stream).wait()
    check("mpi path result", np.array_equal(x.numpy(stream), sum(values(100, np.float32, r) for r in range(size))))
    check("mpi path uses no NCCL", collectives() == 0 and nccl.standin_nccl_comms() == 0)
    check("nccl_built still tells NCCL loads", hvd.nccl_built())

if mode == "ok":
    check("nccl_built", hvd.nccl_built())
    # 1. all-reduce over NCCL: the producer is a slow fake kernel (hvdlite's stream must wait
    #    for it), the consumer a fake kernel right after wait(stream).
    for dtype in (np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8):
        for n in (1, 1000, 300_001):
            x = arr(np.zeros(n, dtype))
            rt.fill_async(x, values(n, dtype, rank), 20_000, stream)
            before = collectives()
            ops.allreduce_async(x, op=hvd.Sum, stream=stream).wait()
            seen = rt.read_async(x, stream)
            rt.sync(stream)
            want = sum(values(n, np.int64, r) for r in range(size)).astype(dtype)
            check(f"nccl sum {np.dtype(dtype).name}[{n}]", np.array_equal(seen, want), f"{seen[:4]} {want[:4]}")
            check(f"one NCCL call {np.dtype(dtype).name}[{n}]", collectives() - before == 1)
    for op, fn in ((hvd.Min, np.minimum.reduce), (hvd.Max, np.maximum.reduce), (hvd.Average, None)):
        x = arr(values(64, np.float32, rank))
        ops.allreduce_async(x, op=op, stream=stream).wait()
        per_rank = [values(64, np.float32, r) for r in range(size)]
        want = fn(per_rank) if fn else sum(per_rank) / size
        check(f"nccl op {op}", np.allclose(x.numpy(stream), want))
    # 2. device fusion: a group is ONE NCCL all-reduce.
    xs = [arr(values(100 + i, np.float32, rank)) for i in range(5)]
    before = collectives()
    ops.grouped_allreduce_async(xs, op=hvd.Sum, stream=stream).wait()
    check("grouped: one NCCL call", collectives() - before == 1, str(collectives() - before))
    for i, t in enumerate(xs):
        check(f"grouped member {i}", np.array_equal(t.numpy(stream), sum(values(100 + i, np.float32, r) for r in range(size))))
    # 3. broadcast over NCCL, out of place.
    b, out = arr(np.full(1000, rank, np.int32)), DeviceArray(rt, (1000,), np.int32, device=dev)
    before = collectives()
    ops.broadcast_async(b, size - 1, out, stream=stream).wait()
    check("nccl broadcast", np.array_equal(out.numpy(stream), np.full(1000, size - 1)) and collectives() - before == 1)
    check("broadcast leaves its input", np.array_equal(b.numpy(stream), np.full(1000, rank)))
    # 4. what NCCL does not carry here is staged and still right: prescale, allgather.
    x = arr(values(10, np.float32, rank))
    before = collectives()
    ops.allreduce_async(x, op=hvd.Sum, prescale_factor=2.0, stream=stream).wait()
    check("prescaled: host path", collectives() == before and np.array_equal(
        x.numpy(stream), 2 * sum(values(10, np.float32, r) for r in range(size))))
    g = ops.allgather_async(arr(np.full((2, 3), rank, np.float32)), stream=stream).wait()[0].array()
    check("allgather staged", np.array_equal(g, np.repeat(np.arange(size, dtype=np.float32), 2)[:, None] * np.ones(3)))
    # 5. allgather, reducescatter, alltoall over NCCL (device_output=True): outputs stay in
    #    (stand-in) device memory; the NCCL calls made show which path each took.
    def on_device(result):
        return DeviceArray.from_dlpack(rt, result.output)

    def gathered(rows_of, cols, r_dtype=np.float32):
        return np.concatenate([np.full((rows_of(r), cols), r + 1, r_dtype) for r in range(size)])

    for rows_of, label, calls in ((lambda r: 3, "equal", 1), (lambda r: r + 1, "unequal", size)):
        x = arr(np.zeros((rows_of(rank), 4), np.float32))
        rt.fill_async(x, np.full((rows_of(rank), 4), rank + 1, np.float32), 20_000, stream)
        before = collectives()
        res = ops.allgather_async(x, stream=stream, device_output=True).wait()[0]
        got = on_device(res)
        check(f"nccl allgather {label}: calls", collectives() - before == calls, str(collectives() - before))
        check(f"nccl allgather {label}", np.array_equal(got.numpy(stream), gathered(rows_of, 4)))
    # a group of all-gathers of mixed dtypes and unequal rows: one fused batch
    xs = [arr(np.full((rank + 1, 2), rank + 1, np.float32)), arr(np.full((2, 3), rank + 1, np.int64)),
          arr(np.full((rank % 2, 5), rank + 1, np.float16))]
    before = collectives()
    res = ops.grouped_allgather_async(xs, stream=stream, device_output=True).wait()
    check("grouped allgather: one batch", collectives() - before == size, str(collectives() - before))
    check("grouped allgather 0", np.array_equal(on_device(res[0]).numpy(stream), gathered(lambda r: r + 1, 2)))
    check("grouped allgather 1", np.array_equal(on_device(res[1]).numpy(stream), gathered(lambda r: 2, 3, np.int64)))
    check("grouped allgather 2", np.array_equal(on_device(res[2]).numpy(stream), gathered(lambda r: r % 2, 5, np.float16)))
    xs = [arr(np.full((2, 2), rank, np.int32)) for _ in range(3)]
    before = collectives()
    res = ops.grouped_allgather_async(xs, stream=stream, device_output=True).wait()
    check("grouped allgather equal: one ncclAllGather", collectives() - before == 1, str(collectives() - before))
    check("grouped allgather equal", all(np.array_equal(on_device(r).numpy(stream), np.repeat(np.arange(size), 2)[:, None] * np.ones((1, 2))) for r in res))
    # reducescatter: even split (one ncclReduceScatter), uneven (one ncclReduce per rank)
    for rows, label, calls in ((2 * size, "even", 1), (2 * size + 1, "uneven", size)):
        x = arr(np.zeros((rows, 3), np.float64))
        per_rank = [np.arange(rows * 3, dtype=np.float64).reshape(rows, 3) * (r + 1) for r in range(size)]
        rt.fill_async(x, per_rank[rank], 20_000, stream)
        before = collectives()
        res = ops.reducescatter_async(x, op=hvd.Sum, stream=stream, device_output=True).wait()[0]
        mine = [2 + (1 if r < rows % size else 0) for r in range(size)]
        start = sum(mine[:rank])
        check(f"nccl reducescatter {label}: calls", collectives() - before == calls, str(collectives() - before))
        check(f"nccl reducescatter {label}", np.array_equal(on_device(res).numpy(stream), sum(per_rank)[start:start + mine[rank]]))
    xs = [arr(values(12 * size, np.float32, rank).reshape(-1, 2)), arr(values(3 * size, np.float32, rank))]
    before = collectives()
    res = ops.grouped_reducescatter_async(xs, op=hvd.Average, stream=stream, device_output=True).wait()
    check("grouped reducescatter: one call", collectives() - before == 1, str(collectives() - before))
    want0 = (sum(values(12 * size, np.float32, r) for r in range(size)) / size).reshape(-1, 2)
    want1 = sum(values(3 * size, np.float32, r) for r in range(size)) / size
    check("grouped reducescatter 0", np.allclose(on_device(res[0]).numpy(stream), want0[6 * rank:6 * rank + 6]))
    check("grouped reducescatter 1", np.allclose(on_device(res[1]).numpy(stream), want1[3 * rank:3 * rank + 3]))
    # alltoall with splits (rank r sends r + p rows to p; some pairs send nothing)
    splits = [(rank + p) % 3 for p in range(size)]
    x = arr(np.concatenate([np.full(((rank + p) % 3, 2), 10 * rank + p, np.int32) for p in range(size)]).reshape(-1, 2))
    before = collectives()
    res = ops.alltoall_async(x, splits, stream=stream, device_output=True).wait()[0]
    recv = [(p + rank) % 3 for p in range(size)]
    want = np.concatenate([np.full((recv[p], 2), 10 * p + rank, np.int32) for p in range(size)]).reshape(-1, 2)
    sends = sum(1 for n in splits if n) + sum(1 for n in recv if n)
    check("nccl alltoall: one send/recv per non-empty pair", collectives() - before == sends, str(collectives() - before))
    check("nccl alltoall", np.array_equal(on_device(res).numpy(stream), want))
    check("nccl alltoall received splits", list(res.received_splits) == recv)
    # without device_output the output is host memory (staged): adapters that predate NCCL
    before = collectives()
    g = ops.allgather_async(arr(np.full(3, rank, np.int16)), stream=stream).wait()[0]
    check("no device_output: staged", collectives() == before and isinstance(g.output, np.ndarray))
    # 5b. device outputs go back to the device's pool when the array dies (Note [device
    #     outputs back to the pool]): the same all-gather again and again takes no new
    #     memory, and a buffer is not reused while the consumer's stream still reads it.
    got = res = None   # the outputs section 5 still holds
    gc.collect()
    counts_before = _core.device_output_counts()
    x = arr(np.full((4, 2), rank, np.float32))
    want = np.repeat(np.arange(size, dtype=np.float32), 4)[:, None] * np.ones(2, np.float32)
    warm = on_device(ops.allgather_async(x, stream=stream, device_output=True).wait()[0])
    del warm
    rt.sync(stream)
    mallocs = rt.mallocs()
    for i in range(8):
        got = on_device(ops.allgather_async(x, stream=stream, device_output=True).wait()[0])
        check("pooled allgather", np.array_equal(got.numpy(stream), want))
        del got
    check("pooled allgather: no cudaMalloc once warm", rt.mallocs() == mallocs, str(rt.mallocs() - mallocs))
    # The consumer's slow read (a copy after CUDA_STANDIN_COPY_DELAY_US) is still queued when
    # the array dies; the next all-gather of the same size must not write into it before.
    got = on_device(ops.allgather_async(x, stream=stream, device_output=True).wait()[0])
    first = np.empty(want.shape, np.float32)
    rt.check(rt.lib.standin_read_async(first.ctypes.data, got.ptr, first.nbytes, stream), "read")
    del got
    y = arr(np.full((4, 2), 100 + rank, np.float32))
    again = on_device(ops.allgather_async(y, stream=stream, device_output=True).wait()[0])
    rt.sync(stream)
    check("a pooled buffer waits for its consumer's stream", np.array_equal(first, want), str(first))
    check("the next all-gather's own result", np.array_equal(again.numpy(stream), want + 100))
    del again
    gc.collect()
    counts = _core.device_output_counts()
    check("every device output given back", counts["live"] == counts_before["live"] and
          counts["given_back"] - counts_before["given_back"] == 11, f"{counts_before} -> {counts}")
    # 6. one communicator per process set, made once.
    check("one communicator for the global set", nccl.standin_nccl_comms() == 1)
    members = [0, 1] if size > 2 else [0]
    ps = hvd.add_process_set(members)
    if rank in members:
        for _ in range(3):
            x = arr(values(30, np.float32, rank))
            ops.allreduce_async(x, op=hvd.Sum, process_set=ps, stream=stream).wait()
            check("process set result", np.array_equal(x.numpy(stream), sum(values(30, np.float32, r) for r in members)))
    check("one more communicator per set", nccl.standin_nccl_comms() == (2 if rank in members else 1))
    hvd.remove_process_set(ps)
    rt.sync(stream)
    check("no copy of the wrong kind", rt.violations() == "", rt.violations())
    check("every event waited on", rt.unwaited_events() == 0, str(rt.unwaited_events()))

if mode == "join":
    # Note [join over NCCL]: the last rank joins after one all-reduce of its own; the others
    # go on all-reducing CUDA tensors over NCCL (one at a time, and fused), and it takes part
    # with zeros, so Sum is the others' sum and Average divides it by every rank.
    x = arr(values(10, np.float32, rank))
    ops.allreduce_async(x, op=hvd.Sum, stream=stream).wait()
    check("before the join", np.array_equal(x.numpy(stream), sum(values(10, np.float32, r) for r in range(size))))
    others = range(size - 1)
    before = collectives()
    if rank == size - 1:
        last = ops.join_async(finish=ops.last_joined_rank).wait()
    else:
        for i in range(3):
            for n in (1, 1000, 300_001):
                y = arr(np.zeros(n, np.float32))
                rt.fill_async(y, values(n, np.float32, rank), 20_000, stream)
                ops.allreduce_async(y, op=hvd.Sum, stream=stream).wait()
                check(f"joined rank adds zeros: {n}", np.array_equal(y.numpy(stream), sum(values(n, np.float32, r) for r in others)))
            ys = [arr(values(n, np.float64, rank)) for n in (5, 70)]
            ops.grouped_allreduce_async(ys, op=hvd.Average, stream=stream).wait()
            for y, n in zip(ys, (5, 70)):
                want = sum(values(n, np.float64, r) for r in others) / size
                check(f"joined rank, fused average: {n}", np.allclose(y.numpy(stream), want))
        last = ops.join_async(finish=ops.last_joined_rank).wait()
    check("the all-reduces ran on NCCL on every rank", collectives() - before >= 12, str(collectives() - before))
    check("last joined rank", last == (size - 2 if size > 1 else 0), str(last))
    rt.sync(stream)
    check("no copy of the wrong kind", rt.violations() == "", rt.violations())
    check("every event waited on", rt.unwaited_events() == 0, str(rt.unwaited_events()))

if mode == "error":
    # The stand-in fails this rank's 3rd collective (NCCL_STANDIN_FAIL_*); its peers then
    # wait in vain and time out. Every rank must get an hvdlite error, and none hang.
    error = None
    t0 = time.time()
    for i in range(200):
        try:
            x = arr(values(1000, np.float32, rank))
            ops.allreduce_async(x, op=hvd.Sum, stream=stream).wait()
            rt.sync(stream)
        except HvdliteError as e:
            error = e
            break
        time.sleep(0.05)
    check("an NCCL failure became an error", error is not None, f"after {time.time() - t0:.1f} s")
    print(f"rank {rank} error: {type(error).__name__}: {error}", flush=True)

if mode in ("propagate", "rebuild"):
    # Rank 1's 3rd NCCL collective fails (NCCL_STANDIN_FAIL_*); its peers' copies of it wait
    # for rank 1 in vain, and their own NCCL would not notice for NCCL_STANDIN_TIMEOUT_S (set
    # long): they must learn it from rank 1 through negotiation (a host collective here),
    # abort their communicators and raise the same named error, within seconds.
    x = arr(values(1000, np.float32, rank))
    error, t0 = None, time.time()
    for i in range(200):
        try:
            ops.allreduce_async(x, op=hvd.Sum, stream=stream).wait()  # the host does not wait
            hvd.allreduce(np.ones(1), op=hvd.Sum, name=f"host.{i}")
        except HvdliteError as e:
            error = e
            break
        time.sleep(0.05)
    elapsed = time.time() - t0
    print(f"rank {rank} error after {elapsed:.1f} s: {type(error).__name__}: {error}", flush=True)
    check("a named error on every rank", type(error).__name__ == "HvdliteInternalError")
    check("within seconds", elapsed < 20, f"{elapsed:.1f} s")
    check("naming NCCL", "NCCL" in str(error) and "abort" in str(error))
    rt.sync(stream)  # the aborted collective's stream drains (no rank stays blocked in it)
    check("the stream drained", True)
    if mode == "rebuild":
        # Elastic recovery (hvdlite.elastic.run does this on HvdliteInternalError): hvdlite is
        # rebuilt over the same ranks and the next NCCL collective gets a fresh communicator.
        from hvdlite import _core
        lost = _core.rebuild()
        check("no rank lost", lost == [], str(lost))
        comms = nccl.standin_nccl_comms()
        y = arr(values(500, np.float32, rank))
        ops.allreduce_async(y, op=hvd.Sum, stream=stream).wait()
        check("after the rebuild: exact", np.array_equal(y.numpy(stream), sum(values(500, np.float32, r) for r in range(size))))
        check("a fresh communicator", nccl.standin_nccl_comms() == comms + 1, f"{comms} -> {nccl.standin_nccl_comms()}")
        part = arr(np.full(2, rank, np.int32))  # alive until read: the stand-in's cudaFree does not wait for streams
        g = ops.allgather_async(part, stream=stream, device_output=True).wait()[0]
        got = DeviceArray.from_dlpack(rt, g.output).numpy(stream)
        check("allgather on it", np.array_equal(got, np.repeat(np.arange(size), 2)), str(got))

if mode == "lost":
    # Elastic (hvdlite-run --min-np): the last rank dies after an NCCL all-reduce. The
    # survivors' next collective fails with HvdliteRanksLostError, their communicators are
    # aborted (no rank stays blocked in NCCL), and after the rebuild NCCL runs on a fresh one.
    import signal
    from hvdlite import _core
    x = arr(values(100, np.float32, rank))
    ops.allreduce_async(x, op=hvd.Sum, stream=stream).wait()
    check("before: exact", np.array_equal(x.numpy(stream), sum(values(100, np.float32, r) for r in range(size))))
    if rank == size - 1:
        os.kill(os.getpid(), signal.SIGKILL)
    error = None
    try:
        for i in range(100):
            y = arr(values(100, np.float32, rank))
            ops.allreduce_async(y, op=hvd.Sum, stream=stream).wait()
            rt.sync(stream)
            time.sleep(0.05)
    except HvdliteError as e:
        error = e
    check("a lost rank is a named error", type(error).__name__ == "HvdliteRanksLostError", repr(error))
    check("the communicator was aborted", nccl.standin_nccl_aborts() >= 1, str(nccl.standin_nccl_aborts()))
    rt.sync(stream)
    comms = nccl.standin_nccl_comms()
    lost = _core.rebuild()
    check("the dead rank is the one lost", lost == [size - 1], str(lost))
    survivors = size - 1
    dev = hvd.rank()
    z = arr(values(300, np.float32, hvd.rank()))
    ops.allreduce_async(z, op=hvd.Sum, stream=stream).wait()
    check("after the rebuild: exact", np.array_equal(z.numpy(stream), sum(values(300, np.float32, r) for r in range(survivors))))
    check("a fresh communicator", nccl.standin_nccl_comms() == comms + 1)
    rank = hvd.rank()

hvd.shutdown()
print(f"rank {rank}: {count()} checks passed", flush=True)
