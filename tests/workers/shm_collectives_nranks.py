"""All-gather, broadcast and reduce-scatter through shared memory at N ranks on one host
(csrc/algorithms/shm_collectives_nranks.h).

argv[1]: "on" (the default HVDLITE_SHM_COLLECTIVES) or "off" (the setting at 0: MPI's
collectives and the ring). Results are checked exactly: the all-gather and broadcast byte for
byte, the reduce-scatter's Sum bit for bit against the ring's operand order written out in
numpy (rank r's share: x[r] + (x[r-1] + (... + x[r+1]))). The counters show the path: one
shared-memory collective per call, copying what the algorithm copies (all-gather and
broadcast: the whole output, into or out of the area), in ceil(largest segment / 64 KiB)
rounds.
"""
import sys

import numpy as np

import hvdlite as hvd
from hvdlite import _core

mode = sys.argv[1]
hvd.init()
R, N = hvd.rank(), hvd.size()
assert hvd.local_size() == N, (hvd.local_size(), N)
PIECE = 64 << 10


def check_path(s, copied, largest):
    if mode == "on":
        assert s["shared_memory_collectives"] == 1, s
        assert s["shared_memory_copied_bytes"] == copied, (copied, s)
        assert s["shared_memory_rounds"] == -(-largest // PIECE), (largest, s)
    else:
        assert s["shared_memory_collectives"] == s["shared_memory_rounds"] == 0, s


def rows_of(r, k):
    return 0 if (r + k) % 4 == 3 else (r + 1) * (k * 997 % 5000 + 1)


for k, dtype in enumerate((np.float32, np.float64, np.int32, np.uint8, np.float16)):
    # All-gather of uneven rows (one rank's empty now and then).
    cols = 3
    parts = [np.random.default_rng(k * 10 + r).integers(0, 100, size=(rows_of(r, k), cols)).astype(dtype)
             for r in range(N)]
    _core.transport_stats(reset=True)
    got = hvd.allgather(parts[R], name=f"ag.{k}")
    s = _core.transport_stats(reset=True)
    want = np.concatenate(parts)
    assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), ("allgather", dtype)
    check_path(s, want.nbytes, max(p.nbytes for p in parts))

    # Broadcast from each root.
    for root in range(N):
        n = (k + 1) * 40001 + root
        src = np.random.default_rng(k * 100 + root).integers(0, 100, size=n).astype(dtype)
        buf = src if R == root else np.zeros_like(src)
        _core.transport_stats(reset=True)
        got = hvd.broadcast(buf, root_rank=root, name=f"bc.{k}.{root}")
        s = _core.transport_stats(reset=True)
        assert got.tobytes() == src.tobytes(), ("broadcast", dtype, root)
        check_path(s, src.nbytes, src.nbytes)

# Reduce-scatter: floats whose sums depend on the order.
for rows in (1, N + 1, 5003):
    xs = [(np.random.default_rng(rows * 10 + r).standard_normal((rows, 17)) *
           (1e4 if r % 2 else 1e-4)).astype(np.float32) for r in range(N)]
    _core.transport_stats(reset=True)
    got = hvd.reducescatter(xs[R], op=hvd.Sum, name=f"rs.{rows}")
    s = _core.transport_stats(reset=True)
    split = [rows // N + (1 if r < rows % N else 0) for r in range(N)]
    lo = sum(split[:R])
    mine = [x[lo:lo + split[R]] for x in xs]
    acc = mine[(R + 1) % N]
    for k in range(2, N):
        acc = mine[(R + k) % N] + acc
    want = mine[R] + acc
    assert got.shape == want.shape and got.tobytes() == want.tobytes(), ("reducescatter", rows)
    total = rows * 17 * 4
    own = split[R] * 17 * 4
    if mode == "on":
        assert s["shared_memory_collectives"] == 1, s
        assert s["shared_memory_copied_bytes"] == total - own, s  # this rank's pieces of the others' shares
    else:
        assert s["shared_memory_collectives"] == 0, s
    avg = hvd.reducescatter(xs[R], op=hvd.Average, name=f"rs.avg.{rows}")
    np.testing.assert_allclose(avg, sum(m.astype(np.float64) for m in mine) / N, rtol=1e-4, atol=1e-3)
if R == 0:
    print(f"shm_collectives_nranks {mode} OK at {N} ranks", flush=True)
hvd.shutdown()
