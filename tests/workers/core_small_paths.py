"""The small all-reduce paths: a waiting caller running the rounds itself (several threads at
once, mixed with asynchronous requests the engine's thread runs), 2-rank merged rounds that
carry the data inside negotiation, 1-rank rounds that reach no transport, and the exchange
all-reduce. Every result is checked against the exact answer and is bitwise identical on
every rank."""
import os
import threading

import numpy as np

import hvdlite as hvd
from hvdlite import _core

hvd.init()
R, N = hvd.rank(), hvd.size()
SIZES = [1, 7, 1000, 4096, 12000, 70000]   # merged (<= 16 KiB), exchange (<= 64 KiB), ring


def same_everywhere(y, what):
    everyone = hvd.allgather(y.reshape(1, -1), name=f"check.{what}")
    for r in range(N):
        assert np.array_equal(everyone[r], everyone[0]), f"{what}: rank {r} differs from rank 0"


# Random floats, reduced twice (the second time the response is cached: merged at 2 ranks).
rng = np.random.default_rng(R)
for count in SIZES:
    for op in (hvd.Sum, hvd.Average, hvd.Max, hvd.Min):
        for rep in range(2):
            x = rng.standard_normal(count).astype(np.float32)
            xs = hvd.allgather(x.reshape(1, -1), name=f"in.{count}.{op}.{rep}")
            y = hvd.allreduce(x, op=op, name=f"rand.{count}.{op}")
            same_everywhere(y, f"rand.{count}.{op}.{rep}")
            ref = {hvd.Sum: xs.sum(0), hvd.Average: xs.mean(0), hvd.Max: xs.max(0),
                   hvd.Min: xs.min(0)}[op]
            np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)

# Integers are exact: prescale/postscale and in-place forms, repeated (cached) calls.
for count in SIZES:
    for rep in range(3):
        x = np.full(count, R + 1 + rep, np.int64)
        hvd.allreduce_(x, op=hvd.Sum, name=f"int.{count}", postscale_factor=2.0)
        assert (x == 2 * sum(r + 1 + rep for r in range(N))).all(), (count, rep, x[:3])

# Data counted where it travels: a merged round moves its data as data, not negotiation.
x = np.ones(1000, np.float32)
hvd.allreduce_(x, name="counted")
_core.transport_stats(reset=True)
hvd.allreduce_(x, name="counted")
s = _core.transport_stats()
if N == 1:
    # One rank (Note [solo rounds] in csrc/engine/controller.h): no round reached MPI.
    assert s["control_bytes_sent"] == 0 and s["shared_memory_swaps"] == 0, s
    assert s["bytes_sent"] == s["bytes_received"] == 0, s
if N == 2:
    assert s["bytes_sent"] == s["bytes_received"] == x.nbytes, s
    # Both ranks are on this host: the round went through shared memory (where there is one).
    if os.access("/dev/shm", os.W_OK):
        assert s["shared_memory_swaps"] >= 1, s

# Several threads waiting on their own synchronous all-reduces (each may run the rounds), while
# the main thread's asynchronous ones go through the engine's thread.
errors = []


def worker(t):
    try:
        for i in range(40):
            count = SIZES[(i + t) % len(SIZES)]
            x = np.full(count, float(R + t + i), np.float64)
            y = hvd.allreduce(x, op=hvd.Sum, name=f"thread{t}.{i % 4}")
            want = float(sum(r + t + i for r in range(N)))
            assert (y == want).all(), (t, i, y[:3], want)
    except Exception as e:  # noqa: BLE001 - reported below
        errors.append(f"thread {t}: {type(e).__name__}: {e}")


threads = [threading.Thread(target=worker, args=(t,)) for t in range(3)]
for th in threads:
    th.start()
for i in range(40):
    works = [hvd.allreduce_async(np.full(SIZES[k], float(R * k + i)), op=hvd.Sum,
                                 name=f"async.{k}") for k in range(len(SIZES))]
    for k, w in enumerate(works):
        assert (hvd.synchronize(w) == sum(r * k + i for r in range(N))).all()
for th in threads:
    th.join(timeout=120)
    assert not th.is_alive(), "a thread's synchronous all-reduce hung"
assert not errors, errors

hvd.shutdown()
print(f"rank {R}: ALL OK", flush=True)
