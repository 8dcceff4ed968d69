"""Allgather, alltoall and broadcast larger than one MPI call can take.

MPI counts and displacements are ints: a block or an offset of 2 GiB or more must go in
pieces. tests/test_hardening.py runs this with HVDLITE_TEST_MAX_TRANSFER_BYTES lowered (a
test-only knob) so that the piecewise paths run on kilobytes; with `--rows-per-rank N` and
no knob it is the real > 2 GiB check, run by hand:

    mpirun -np 2 python tests/workers/core_large_transfers.py --real 2200000000 1
    mpirun -np 3 python tests/workers/core_large_transfers.py --real 1100000000 1100000000 1
"""
import os
import sys

import numpy as np

import hvdlite as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
LIMIT = int(os.environ.get("HVDLITE_TEST_MAX_TRANSFER_BYTES", 2**31 - 1))


def pattern(rank, n, dtype=np.uint8, start=0):
    """Rank-specific values whose every position is checkable: (index * 7 + rank) mod 251,
    built from one period so that gigabyte patterns cost no more than their own bytes."""
    period = ((np.arange(start, start + 251, dtype=np.int64) * 7 + rank) % 251).astype(dtype)
    return np.resize(period, n)


def equal_to_pattern(got, rank, dtype=np.uint8, chunk=64 << 20):
    """Compares in chunks (a multiple of the period) to keep temporaries small."""
    chunk -= chunk % 251
    return all(np.array_equal(got[a:a + chunk], pattern(rank, len(got[a:a + chunk]), dtype))
               for a in range(0, len(got), chunk)) if len(got) else True


def check_allgather(rows_per_rank, row_shape=(), dtype=np.uint8, tag=""):
    x = np.empty((rows_per_rank[R],) + row_shape, dtype)
    x.reshape(-1)[:] = pattern(R, x.size, dtype)
    got = hvd.allgather(x, name=f"ag.{tag}")
    del x
    assert got.shape == (sum(rows_per_rank),) + row_shape, got.shape
    flat, at = got.reshape(-1), 0
    for r, rows in enumerate(rows_per_rank):
        n = rows * int(np.prod(row_shape, dtype=np.int64))
        if not equal_to_pattern(flat[at:at + n], r, dtype):
            raise AssertionError(f"rank {R}: allgather {tag}: block of rank {r} is wrong")
        at += n


def check_alltoall(split_matrix, tag=""):
    """split_matrix[s][d]: rows rank s sends to rank d (one uint8 per row)."""
    mine = split_matrix[R]
    x = np.concatenate([pattern(R * N + d, n) for d, n in enumerate(mine)])
    got, received = hvd.alltoall(x, splits=mine, name=f"a2a.{tag}")
    want_rows = [split_matrix[s][R] for s in range(N)]
    assert list(received) == want_rows, (received, want_rows)
    at = 0
    for s, n in enumerate(want_rows):
        if not equal_to_pattern(got[at:at + n], s * N + R):
            raise AssertionError(f"rank {R}: alltoall {tag}: rows from rank {s} are wrong")
        at += n


def check_broadcast(n, tag=""):
    for root in range(N):
        x = pattern(R, n)
        hvd.broadcast_(x, root, name=f"bc.{tag}.{root}")
        assert np.array_equal(x, pattern(root, n)), f"broadcast {tag} from {root}"


def small_scale():
    L = LIMIT
    assert L < 10**6, "run with HVDLITE_TEST_MAX_TRANSFER_BYTES lowered (e.g. 1000)"
    # Every block above the limit, uneven, several pieces each (and one not a multiple of it).
    check_allgather([3 * L + 7 + 11 * r for r in range(N)], tag="blocks")
    # No block above the limit, but the later blocks' offsets are (the 3-rank overflow).
    check_allgather([L // 2 + 100] * (N - 1) + [1], tag="offsets")
    # Multi-byte rows whose pieces cut through rows and elements; one rank sends nothing.
    check_allgather([0 if r == 1 else 2 * L // 12 + r for r in range(N)], (3,), np.float32, "rows")
    # alltoall: some pairs above the limit, some small, some empty, uneven both ways.
    m = [[(s * 3 + d * 5) % 4 * L + (s + 2 * d) * 13 for d in range(N)] for s in range(N)]
    m[0][N - 1] = 0
    check_alltoall(m, "uneven")
    check_alltoall([[L // 3] * N for _ in range(N)], "offsets")
    check_broadcast(5 * L + 3, "pieces")
    # Ordinary sizes still take the single-call path in the same job.
    check_allgather([5 + r for r in range(N)], tag="small")
    check_alltoall([[2] * N for _ in range(N)], "small")


def real(sizes):
    """By hand: the first N numbers are each rank's allgather size in bytes."""
    import time
    rows = [int(v) for v in sizes[:N]]
    t = time.time()
    check_allgather(rows, tag="real")
    if R == 0:
        print(f"allgather of {rows} bytes ({sum(rows) / 2**30:.2f} GiB out): ok in "
              f"{time.time() - t:.1f} s", flush=True)
    got = hvd.allreduce(np.ones(3, np.float32), op=hvd.Sum, name="after")
    assert (got == N).all()
    # alltoall: rank 0 sends rows[0] - its share to rank 1, the rest stays small.
    m = [[1] * N for _ in range(N)]
    m[0][1] = rows[0]
    t = time.time()
    check_alltoall(m, "real")
    if R == 0:
        print(f"alltoall with a {rows[0]}-byte block: ok in {time.time() - t:.1f} s", flush=True)


if len(sys.argv) > 2 and sys.argv[1] == "--real":
    real(sys.argv[2:])
else:
    small_scale()
got = hvd.allreduce(np.ones(3, np.float32), op=hvd.Sum, name="still.usable")
assert (got == N).all()
hvd.shutdown()
print(f"rank {R}: ALL OK", flush=True)
