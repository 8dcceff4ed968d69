"""All-reduce through shared memory at N ranks on one host (csrc/algorithms/shm_allreduce_nranks.h).

argv[1]: "on" (the default setting: every batch goes through shared memory) or "off"
(HVDLITE_SHM_ALLREDUCE_MIN_BYTES=0: none does). Results are checked exactly against numpy
(inputs are small integers, so every order of the sum gives the same bits; Average within a
rounding), and the transport's counters against the algorithm's count: one shared-memory
all-reduce per call, copying 2 x buffer - own segment bytes, in ceil(largest segment / piece)
rounds of 64 KiB pieces; the negotiation's rounds go through the shared board either way.
"""
import sys

import numpy as np

import hvdlite as hvd
from hvdlite import _core

mode = sys.argv[1]
hvd.init()
R, N = hvd.rank(), hvd.size()
assert hvd.local_size() == N, (hvd.local_size(), N)


def inputs(r, count, dtype, seed):
    rng = np.random.default_rng(seed * 100 + r)
    return rng.integers(-4, 5, size=count).astype(dtype)


def segment_counts(count):
    base, extra = divmod(count, N)
    return [base + (1 if r < extra else 0) for r in range(N)]


PIECE = 64 << 10  # Transport::shared_area_bytes(N) at 3-4 ranks allows 64 KiB pieces
ops = {"sum": (hvd.Sum, lambda xs: np.sum(xs, axis=0)), "min": (hvd.Min, lambda xs: np.min(xs, axis=0)),
       "max": (hvd.Max, lambda xs: np.max(xs, axis=0)), "prod": (hvd.Product, lambda xs: np.prod(xs, axis=0))}
seed = 0
for dtype in (np.float32, np.float64, np.float16, np.int32, np.int64):
    for count in (1, N - 1, N + 1, 1000, 3 * 16384 * N + 7, 400001):
        for opname, (op, ref) in ops.items():
            if opname == "prod" and count > 1000:
                continue  # products of many small integers overflow; the small cases suffice
            seed += 1
            xs = [inputs(r, count, dtype, seed) for r in range(N)]
            _core.transport_stats(reset=True)
            got = hvd.allreduce(xs[R], op=op, name=f"{dtype.__name__}.{count}.{opname}")
            s = _core.transport_stats(reset=True)
            want = ref(np.stack(xs)).astype(dtype)
            # The negotiation's AND went through the shared board (csrc/transport/shm_board.h).
            assert s["shared_memory_swaps"] >= 1, s
            assert got.dtype == want.dtype and np.array_equal(got, want), (dtype, count, opname, got, want)
            es = np.dtype(dtype).itemsize
            own = segment_counts(count)[R] * es
            if mode == "on":
                rounds = -(-max(segment_counts(count)) * es // PIECE)
                assert s["shared_memory_allreduces"] == 1, s
                assert s["shared_memory_copied_bytes"] == 2 * count * es - own, (count, es, s)
                assert s["shared_memory_rounds"] == rounds, (count, es, rounds, s)
                assert s["bytes_sent"] == s["bytes_received"] == count * es - own + (N - 1) * own, s
            else:
                assert s["shared_memory_allreduces"] == s["shared_memory_copied_bytes"] == 0, s
                assert s["shared_memory_rounds"] == 0, s

xs = [inputs(r, 300001, np.float32, 999) for r in range(N)]
got = hvd.allreduce(xs[R], op=hvd.Average, name="average")
np.testing.assert_allclose(got, np.mean(np.stack(xs), axis=0), rtol=1e-6, atol=1e-6)
# Every rank holds the same bits.
gathered = hvd.allgather(got[None, :], name="average.bits")
assert all(np.array_equal(gathered[0].view(np.uint32), g.view(np.uint32)) for g in gathered), "ranks differ"
if R == 0:
    print(f"shm_allreduce_nranks {mode} OK at {N} ranks", flush=True)
hvd.shutdown()
