"""Every core collective, dtype and reduce op against numpy references, at any rank count.

Run by tests/test_core.py under mpirun at 1, 2 and 3 ranks, with fusion on and off.
Any failed assertion aborts the whole job (hvdlite's excepthook), failing the test.
"""
import os
import sys

import numpy as np

import hvdlite as hvd

try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:
    BF16 = None

hvd.init()
R, N = hvd.rank(), hvd.size()
OPS = {hvd.Sum: "sum", hvd.Average: "avg", hvd.Min: "min", hvd.Max: "max", hvd.Product: "prod"}
DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64, np.float16, np.float32,
          np.float64, np.bool_]
if BF16 is not None:
    DTYPES.append(BF16)


def rank_data(rank, shape, dtype, seed=0):
    """Deterministic small values so integer products and sums stay exact."""
    rng = np.random.default_rng(1000 * seed + rank)
    if np.dtype(dtype) == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    return rng.integers(1, 4, size=shape).astype(dtype)


def reference(shape, dtype, op, seed=0):
    stack = np.stack([rank_data(r, shape, dtype, seed).astype(np.float64) for r in range(N)])
    if np.dtype(dtype) == np.bool_:
        return {hvd.Sum: stack.any(0), hvd.Max: stack.any(0), hvd.Min: stack.all(0),
                hvd.Product: stack.all(0)}[op]
    res = {hvd.Sum: stack.sum(0), hvd.Average: stack.sum(0) / N, hvd.Min: stack.min(0),
           hvd.Max: stack.max(0), hvd.Product: stack.prod(0)}[op]
    if np.issubdtype(np.dtype(dtype), np.integer) and op == hvd.Average:
        res = np.trunc(res)
    return res


def check(got, want, dtype, what):
    got = np.asarray(got).astype(np.float64)
    if np.dtype(dtype) in (np.dtype(np.float16),) or (BF16 is not None and np.dtype(dtype) == BF16):
        ok = np.allclose(got, want, rtol=2e-2, atol=1e-2)
    else:
        ok = np.allclose(got, want, rtol=1e-6, atol=0)
    assert ok, f"rank {R}: {what}: got {got.ravel()[:8]} want {np.asarray(want).ravel()[:8]}"


def test_allreduce_all_dtypes_and_ops():
    for dtype in DTYPES:
        for op in OPS:
            if np.dtype(dtype) == np.bool_ and op == hvd.Average:
                continue
            shape = (3, 5)
            x = rank_data(R, shape, dtype)
            name = f"ar.{np.dtype(dtype).name}.{OPS[op]}"
            got = hvd.allreduce(x, op=op, name=name)
            assert got.dtype == x.dtype and got.shape == x.shape
            check(got, reference(shape, dtype, op), dtype, name)
            # In place, and again to take the cached fast path.
            for rep in range(2):
                y = x.copy()
                hvd.allreduce_(y, op=op, name=name + ".inplace")
                check(y, reference(shape, dtype, op), dtype, name + f".inplace{rep}")


def test_scaling_and_average_alias():
    x = rank_data(R, (4,), np.float32)
    got = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0, name="scaled")
    check(got, reference((4,), np.float32, hvd.Sum) * 1.5, np.float32, "scaled")
    got = hvd.allreduce(x, average=True, name="alias")
    check(got, reference((4,), np.float32, hvd.Average), np.float32, "average=True")


def test_sizes_and_fusion():
    # Empty, scalar, odd sizes smaller than the rank count, and a large tensor that is cut
    # into many ring pieces.
    for shape in [(0,), (), (1,), (2,), (7, 3), (1 << 20,) , (3, 1000, 7)]:
        x = rank_data(R, shape, np.float32, seed=2)
        got = hvd.allreduce(x, op=hvd.Sum, name=f"size{shape}")
        check(got, reference(shape, np.float32, hvd.Sum, seed=2), np.float32, f"size {shape}")
    # Many small tensors at once: they fuse (unless HVDLITE_FUSION_THRESHOLD=0).
    xs = [rank_data(R, (i % 13 + 1, 3), np.float64, seed=i) for i in range(60)]
    handles = [hvd.allreduce_async(x, op=hvd.Sum, name=f"many{i}") for i, x in enumerate(xs)]
    for i, h in enumerate(handles):
        check(hvd.synchronize(h), reference(xs[i].shape, np.float64, hvd.Sum, seed=i), np.float64, f"many{i}")


def test_mixed_batch_packed_and_in_place():
    # Small tensors are packed into the fusion buffer, large ones (>= 64 KiB) join the same
    # ring in place; out-of-place outputs, prescale and Average (scaled inside the ring).
    sizes = [100, 40000, 7, 50000, 1, 17000, 300]
    xs = [rank_data(R, (n,), np.float32, seed=10 + i) for i, n in enumerate(sizes)]
    handles = [hvd.allreduce_async(x, op=hvd.Average, prescale_factor=2.0, name=f"mixed{i}")
               for i, x in enumerate(xs)]
    for i, h in enumerate(handles):
        want = reference((sizes[i],), np.float32, hvd.Average, seed=10 + i) * 2.0
        check(hvd.synchronize(h), want, np.float32, f"mixed{i}")
    ys = [x.copy() for x in xs]
    handles = [hvd.allreduce_async_(y, op=hvd.Sum, name=f"mixed_{i}") for i, y in enumerate(ys)]
    for i, h in enumerate(handles):
        hvd.synchronize(h)
        check(ys[i], reference((sizes[i],), np.float32, hvd.Sum, seed=10 + i), np.float32, f"mixed_{i}")


def test_different_submission_order():
    # Odd ranks submit in reverse order; negotiation must still pair the names.
    names = [f"order{i}" for i in range(25)]
    order = names[::-1] if R % 2 else names
    xs = {n: np.full((i + 1,), R + i, dtype=np.int64) for i, n in enumerate(names)}
    handles = {n: hvd.allreduce_async(xs[n], op=hvd.Sum, name=n) for n in order}
    for i, n in enumerate(names):
        got = hvd.synchronize(handles[n])
        assert (got == sum(r + i for r in range(N))).all(), (n, got)


def test_async_poll_and_many_in_flight():
    handles = [hvd.allreduce_async(np.full(100, float(i + R)), op=hvd.Max, name=f"poll{i}")
               for i in range(200)]
    while not all(hvd.poll(h) for h in handles):
        pass
    for i, h in enumerate(handles):
        assert (hvd.synchronize(h) == i + N - 1).all()


def test_shape_change_for_same_name():
    for n in (4, 6, 4):
        got = hvd.allreduce(np.ones(n, np.float32), op=hvd.Sum, name="changing")
        assert got.shape == (n,) and (got == N).all()


def test_grouped_allreduce():
    xs = [rank_data(R, (i + 2,), np.float32, seed=i) for i in range(5)]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum, name="grp")
    for i, o in enumerate(outs):
        check(o, reference((i + 2,), np.float32, hvd.Sum, seed=i), np.float32, f"group {i}")
    assert hvd.grouped_allreduce([]) == [] and hvd.synchronize(hvd.grouped_allreduce_async([])) == []
    ys = [x.copy() for x in xs]
    hvd.grouped_allreduce_(ys, op=hvd.Average, name="grp_")
    for i, y in enumerate(ys):
        check(y, reference((i + 2,), np.float32, hvd.Average, seed=i), np.float32, f"group_ {i}")


def test_compression():
    x = np.random.default_rng(R).standard_normal(10000).astype(np.float32)
    want = sum(np.random.default_rng(r).standard_normal(10000).astype(np.float32) for r in range(N))
    for comp, tol in (("fp16", 3e-3), ("bf16", 3e-2)):
        got = hvd.allreduce(x, op=hvd.Sum, name="comp." + comp, compression=comp)
        assert got.dtype == np.float32
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < tol, (comp, err)


def test_allgather():
    for dtype in DTYPES:
        x = np.stack([rank_data(R, (3,), dtype)] * (R + 1))  # R+1 rows on rank R
        got = hvd.allgather(x, name=f"ag.{np.dtype(dtype).name}")
        want = np.concatenate([np.stack([rank_data(r, (3,), dtype)] * (r + 1)) for r in range(N)])
        assert got.dtype == x.dtype and got.shape == want.shape, (got.dtype, got.shape)
        assert (got.astype(np.float64) == want.astype(np.float64)).all()
    got = hvd.allgather(np.zeros((0, 2), np.float32) if R == 0 else np.ones((1, 2), np.float32))
    assert got.shape == (N - 1, 2)


def test_broadcast():
    for root in range(N):
        for dtype in (np.float32, np.int64, np.uint8):
            x = rank_data(R, (4, 2), dtype, seed=root)
            got = hvd.broadcast(x, root, name=f"bc{root}.{np.dtype(dtype).name}")
            assert (got == rank_data(root, (4, 2), dtype, seed=root)).all()
            y = x.copy()
            hvd.broadcast_(y, root, name=f"bc_{root}.{np.dtype(dtype).name}")
            assert (y == rank_data(root, (4, 2), dtype, seed=root)).all()


def test_alltoall():
    # Rank r sends (r + d + 1) rows to rank d; each row holds (sender, receiver).
    splits = [R + d + 1 for d in range(N)]
    x = np.concatenate([np.tile([R, d], (s, 1)) for d, s in enumerate(splits)]).astype(np.int32)
    got, received = hvd.alltoall(x, splits=splits, name="a2a")
    want = np.concatenate([np.tile([s, R], (s + R + 1, 1)) for s in range(N)])
    assert (got == want).all() and list(received) == [s + R + 1 for s in range(N)]
    even = hvd.alltoall(np.arange(2 * N, dtype=np.float32) + 100 * R, name="a2a.even")
    assert (even == np.concatenate([np.arange(2 * R, 2 * R + 2) + 100 * s for s in range(N)])).all()


def test_reducescatter():
    for rows in (N, 2 * N + 1, 1):
        x = rank_data(R, (rows, 3), np.float32, seed=rows)
        full = reference((rows, 3), np.float32, hvd.Sum, seed=rows)
        per_rank = [rows // N + (1 if r < rows % N else 0) for r in range(N)]
        start = sum(per_rank[:R])
        got = hvd.reducescatter(x, op=hvd.Sum, name=f"rs{rows}")
        assert got.shape == (per_rank[R], 3), got.shape
        check(got, full[start:start + per_rank[R]], np.float32, f"reducescatter {rows}")
        got = hvd.reducescatter(x, name=f"rs.avg{rows}")
        check(got, full[start:start + per_rank[R]] / N, np.float32, f"reducescatter avg {rows}")


def test_barrier_and_join():
    hvd.barrier()
    # Rank 0 joins at once; the others keep all-reducing and see zeros from rank 0.
    if R == 0:
        last = hvd.join()
    else:
        for i in range(3):
            got = hvd.allreduce(np.ones(4, np.float32), op=hvd.Sum, name=f"after_join{i}")
            assert (got == N - 1).all(), got
            big = hvd.allreduce(np.ones(30000, np.float32), op=hvd.Sum, name=f"after_join_big{i}")
            assert (big == N - 1).all(), big
            got = hvd.allreduce(np.ones(4, np.float32), name=f"after_join_avg{i}")
            assert np.allclose(got, (N - 1) / N), got
        last = hvd.join()
    assert last == (N - 1 if N > 1 else 0), last
    hvd.barrier()


def main():
    tests = [v for k, v in sorted(globals().items()) if k.startswith("test_")]
    only = sys.argv[1:]
    for t in tests:
        if only and t.__name__ not in only:
            continue
        t()
        if R == 0:
            print(f"ok {t.__name__} (np={N}, fusion={os.environ.get('HVDLITE_FUSION_THRESHOLD', 'default')})", flush=True)
    hvd.shutdown()
    if R == 0:
        print("ALL OK", flush=True)


main()
