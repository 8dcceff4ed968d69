"""Soak: random collectives checked against numpy, with memory sampled for growth.

Every rank draws the same random batches (op, dtype, size, reduce op, sync or async, cached
or fresh name); async members are submitted and waited in a different random order on each
rank, sync ones in a shared order. Every result is compared with numpy's. Resident memory is
sampled after a warm-up and must not grow.

    mpirun -np 3 python tests/workers/core_soak.py --seconds 15      # CI (tests/test_soak.py)
    hvdlite-run -np 3 python tests/workers/core_soak.py --minutes 10  # by hand (also as root)
"""
import argparse
import os
import time

import numpy as np

import hvdlite as hvd
from hvdlite import _core

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=15.0)
parser.add_argument("--minutes", type=float, default=None)
parser.add_argument("--seed", type=int, default=1234)
parser.add_argument("--max-growth-mb", type=float, default=32.0)
args = parser.parse_args()
duration = args.minutes * 60 if args.minutes is not None else args.seconds

hvd.init()
R, N = hvd.rank(), hvd.size()
DTYPES = [np.dtype(d) for d in (np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64,
                                np.float16, np.float32, np.float64, np.bool_)]
KINDS = ["allreduce", "allreduce_", "grouped_allreduce", "allgather", "grouped_allgather",
         "broadcast", "alltoall", "reducescatter", "grouped_reducescatter"]
REDUCE_OPS = [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product]


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def data(seed, rank, shape, dtype):
    rng = np.random.default_rng([seed, rank])
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    return rng.integers(0, 4, size=shape).astype(dtype)  # small: sums and products stay exact


def reduce_ref(arrays, op, dtype):
    stack = np.stack([a.astype(np.float64) for a in arrays])
    if dtype == np.bool_:
        return stack.any(0) if op in (hvd.Sum, hvd.Max) else stack.all(0)
    res = {hvd.Sum: stack.sum(0), hvd.Average: stack.sum(0) * (1.0 / N), hvd.Min: stack.min(0),
           hvd.Max: stack.max(0), hvd.Product: stack.prod(0)}[op]
    if np.issubdtype(dtype, np.integer) and op == hvd.Average:
        res = np.trunc(res)
    return res


def same(got, want, dtype, what):
    got = np.asarray(got)
    assert got.dtype == dtype, f"rank {R}: {what}: dtype {got.dtype}, want {dtype}"
    assert got.shape == np.shape(want), f"rank {R}: {what}: shape {got.shape}, want {np.shape(want)}"
    tol = 1e-2 if dtype == np.float16 else 1e-6
    ok = np.allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=tol, atol=tol)
    assert ok, f"rank {R}: {what}: got {got.ravel()[:6]}, want {np.ravel(want)[:6]}"


class Job:
    """One random collective: start() submits it, finish() waits and checks it."""

    def __init__(self, rng, batch, j):
        self.kind = KINDS[rng.integers(len(KINDS))]
        self.dtype = DTYPES[rng.integers(len(DTYPES))]
        self.sync = rng.random() < 0.3
        big = rng.random() < 0.05
        self.n = int(rng.integers(0, 200_000 if big else 3_000))
        self.op = REDUCE_OPS[rng.integers(len(REDUCE_OPS))]
        if self.dtype == np.bool_ and self.op == hvd.Average:
            self.op = hvd.Max
        self.root = int(rng.integers(N))
        self.rows = [int(rng.integers(0, 40)) for _ in range(N)]           # allgather
        self.splits = rng.integers(0, 30, size=(N, N)).tolist()           # alltoall
        self.members = int(rng.integers(1, 4))
        # Half the names repeat across batches (response cache), half are fresh.
        stable = rng.random() < 0.5
        self.name = f"{self.kind}.{j}" if stable else f"{self.kind}.{batch}.{j}"
        self.seed = batch * 1000 + j

    def start(self):
        k, dt, name = self.kind, self.dtype, self.name
        mine = lambda rank, shape, m=0: data(self.seed * 10 + m, rank, shape, dt)
        if k == "allreduce":
            self.inputs = [mine(R, (self.n,))]
            self.h = hvd.allreduce_async(self.inputs[0], name=name, op=self.op)
        elif k == "allreduce_":
            self.inputs = [mine(R, (self.n,))]
            self.inplace = self.inputs[0].copy()
            self.h = hvd.allreduce_async_(self.inplace, name=name, op=self.op)
        elif k == "grouped_allreduce":
            self.inputs = [mine(R, (self.n // (m + 1),), m) for m in range(self.members)]
            self.h = hvd.grouped_allreduce_async(self.inputs, name=name, op=self.op)
        elif k == "allgather":
            self.h = hvd.allgather_async(mine(R, (self.rows[R], 3)), name=name)
        elif k == "grouped_allgather":
            xs = [mine(R, (self.rows[R] + m, 2), m) for m in range(self.members)]
            self.h = _core.enqueue_grouped_allgather([f"{name}.{m}" for m in range(self.members)], xs)
            self.refs = xs
        elif k == "broadcast":
            self.h = hvd.broadcast_async(mine(R, (self.n,)), self.root, name=name)
        elif k == "alltoall":
            x = np.concatenate([mine(R * N + d, (s, 2)) for d, s in enumerate(self.splits[R])])
            self.h = hvd.alltoall_async(x, splits=self.splits[R], name=name)
        elif k in ("reducescatter", "grouped_reducescatter"):
            if self.dtype == np.bool_:
                self.dtype = dt = np.dtype(np.int32)
            self.shapes = [(self.n // 50 + m + 1, 5) for m in range(self.members)]
            xs = [data(self.seed * 10 + m, R, s, dt) for m, s in enumerate(self.shapes)]
            if k == "reducescatter":
                self.shapes = self.shapes[:1]
                self.h = hvd.reducescatter_async(xs[0], name=name, op=self.op)
            else:
                self.h = _core.enqueue_grouped_reducescatter(
                    [f"{name}.{m}" for m in range(self.members)], xs, self.op, 1.0, 1.0)
            self.refs = xs

    def finish(self):
        k, dt = self.kind, self.dtype
        other = lambda rank, shape, m=0: data(self.seed * 10 + m, rank, shape, dt)
        if k in ("allreduce", "allreduce_"):
            got = hvd.synchronize(self.h)
            got = self.inplace if k == "allreduce_" else got
            same(got, reduce_ref([other(r, (self.n,)) for r in range(N)], self.op, dt), dt, k)
        elif k == "grouped_allreduce":
            for m, got in enumerate(hvd.synchronize(self.h)):
                shape = (self.n // (m + 1),)
                same(got, reduce_ref([other(r, shape, m) for r in range(N)], self.op, dt), dt, k)
        elif k == "allgather":
            want = np.concatenate([other(r, (self.rows[r], 3)) for r in range(N)])
            same(hvd.synchronize(self.h), want, dt, k)
        elif k == "grouped_allgather":
            for m, h in enumerate(self.h):
                want = np.concatenate([other(r, (self.rows[r] + m, 2), m) for r in range(N)])
                same(_core.wait(h)[0], want, dt, k)
        elif k == "broadcast":
            same(hvd.synchronize(self.h), other(self.root, (self.n,)), dt, k)
        elif k == "alltoall":
            got, received = hvd.synchronize(self.h)
            want = np.concatenate([other(s * N + R, (self.splits[s][R], 2)) for s in range(N)])
            same(got, want, dt, k)
            assert list(received) == [self.splits[s][R] for s in range(N)], received
        else:
            handles = [self.h] if k == "reducescatter" else self.h
            for m, (h, shape) in enumerate(zip(handles, self.shapes)):
                got = hvd.synchronize(h) if k == "reducescatter" else _core.wait(h)[0]
                full = reduce_ref([other(r, shape, m) for r in range(N)], self.op, dt)
                per = [shape[0] // N + (1 if r < shape[0] % N else 0) for r in range(N)]
                start = sum(per[:R])
                same(got, full[start:start + per[R]], dt, k)


shared = np.random.default_rng(args.seed)            # same stream on every rank
local = np.random.default_rng([args.seed, R + 1])   # this rank's submission order
t0 = time.time()
baseline = None
samples = []
batches = ops = 0
minute = 0
while True:
    # Every rank stops at the same batch: rank 0's clock decides, through a broadcast.
    go = np.array([time.time() - t0 < duration], np.uint8)
    hvd.broadcast_(go, 0, name="soak.go")
    if not go[0]:
        break
    jobs = [Job(shared, batches, j) for j in range(int(shared.integers(1, 9)))]
    async_jobs = [j for j in jobs if not j.sync]
    for idx in local.permutation(len(async_jobs)):
        async_jobs[idx].start()
    for job in (j for j in jobs if j.sync):
        job.start()
        job.finish()
    for idx in local.permutation(len(async_jobs)):
        async_jobs[idx].finish()
    batches += 1
    ops += len(jobs)
    elapsed = time.time() - t0
    if baseline is None and elapsed > min(0.3 * duration, 60):
        baseline = rss_mb()
    elif baseline is not None and batches % 10 == 0:
        samples.append(rss_mb())
    if duration > 60 and elapsed // 60 > minute:  # long runs show the trend as they go
        minute = elapsed // 60
        print(f"rank {R}: minute {minute:.0f}: {ops} collectives, RSS {rss_mb():.1f} MB", flush=True)

final = rss_mb()
growth = (np.median(samples[-5:]) if samples else final) - (baseline or final)
print(f"rank {R}: {ops} collectives in {batches} batches, {time.time() - t0:.0f} s; "
      f"RSS {baseline or final:.0f} MB after warm-up, {final:.0f} MB at the end "
      f"(growth {growth:+.1f} MB)", flush=True)
assert growth < args.max_growth_mb, f"rank {R}: RSS grew by {growth:.1f} MB"
hvd.shutdown()
print(f"rank {R}: ALL OK", flush=True)
