"""Argument checking that must stay local and leave the job usable: integer parameters,
alltoall splits whose sum overflows 64 bits, read-only outputs; and the core's grouped
allgather / reducescatter. Needs at least 2 ranks."""
import re

import numpy as np

import hvdlite as hvd
from hvdlite import HvdliteInvalidArgumentError, _core

hvd.init()
R, N = hvd.rank(), hvd.size()
assert N >= 2


def expect(pattern, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except HvdliteInvalidArgumentError as e:
        assert re.search(pattern, str(e)), f"message {str(e)!r} does not match {pattern!r}"
        return
    raise AssertionError(f"{fn.__name__}{args} did not raise HvdliteInvalidArgumentError")


def still_works(tag):
    got = hvd.allreduce(np.ones(3, np.float32), op=hvd.Sum, name=f"ok.{tag}")
    assert (got == N).all(), got


# Integer parameters: only integers (numpy's too), else a clear local error.
for bad in (2**31, 2**63, -1, N):
    expect(rf"root rank {bad} is out of range for {N} ranks|root_rank {bad} is out of range",
           hvd.broadcast, np.ones(2), bad)
for bad in (1.5, "0", np.float64(0), None, True):
    expect("root_rank must be an integer", hvd.broadcast, np.ones(2), bad)
assert (hvd.broadcast(np.full(2, R, np.float32), np.int64(N - 1), name="np.root") == N - 1).all()
assert (hvd.broadcast(np.full(2, R, np.float32), np.int32(0), name="np.root32") == 0).all()
for bad in (1.5, "1", 1.0, True):
    expect("op must be an integer", hvd.allreduce, np.ones(2), op=bad)
expect("unknown reduce op 7", hvd.allreduce, np.ones(2), op=7)
expect("split must be an integer", hvd.alltoall, np.ones(N), splits=[1.5] + [1] * (N - 1))
expect("split must be an integer", hvd.alltoall, np.ones(N), splits=["1"] * N)
expect("split -1 is out of range", hvd.alltoall, np.ones(N), splits=[-1] + [1] * (N - 1))
expect("splits must be a sequence", hvd.alltoall, np.ones(N), splits=3)
got = hvd.alltoall(np.arange(N, dtype=np.float32), splits=np.ones(N, np.int64), name="np.splits")[0]
assert got.shape == (N,), got
still_works("ints")

# alltoall splits whose sum wraps around 64 bits: rejected locally, before anything is sent,
# also when the Python layer is bypassed.
huge = [2**63 - 1] * (N - 1) + [5]
expect("overflows 64 bits", hvd.alltoall, np.ones(5), splits=huge)
expect("overflows 64 bits", _core.enqueue_alltoall, "direct", np.ones(5), huge)
still_works("splits")

# A read-only output says so.
ro = np.ones(3, np.float32)
ro.flags.writeable = False
expect(r"'ro' \(output\) is read-only", hvd.allreduce_, ro, name="ro")
expect(r"read-only", hvd.broadcast_, np.frombuffer(b"\0" * 16, np.float32), 0)  # bytes: read-only
still_works("readonly")

# Grouped allgather and reducescatter in the core: one call, one negotiation round.
xs = [np.full((R + 1 + i, 2), R * 10 + i, np.int16) for i in range(3)]
handles = _core.enqueue_grouped_allgather([f"gag.{i}" for i in range(3)], xs)
assert len(handles) == 3
for i, h in enumerate(handles):
    out = _core.wait(h)[0]
    want = np.concatenate([np.full((r + 1 + i, 2), r * 10 + i, np.int16) for r in range(N)])
    assert out.dtype == np.int16 and (out == want).all(), (i, out)
ys = [np.arange((2 * N + i) * 3, dtype=np.uint16).reshape(2 * N + i, 3) + R for i in range(3)]
handles = _core.enqueue_grouped_reducescatter([f"grs.{i}" for i in range(3)], ys, hvd.Sum, 1.0, 1.0)
for i, h in enumerate(handles):
    full = sum(np.arange((2 * N + i) * 3, dtype=np.uint16).reshape(2 * N + i, 3) + r for r in range(N))
    rows = [(2 * N + i) // N + (1 if r < (2 * N + i) % N else 0) for r in range(N)]
    start = sum(rows[:R])
    out = _core.wait(h)[0]
    assert out.dtype == np.uint16 and (out == full[start:start + rows[R]]).all(), (i, out)
assert _core.enqueue_grouped_allgather([], []) == []
expect("grouped allgather got 2 tensors but 1 names", _core.enqueue_grouped_allgather, ["a"],
       [np.ones(1), np.ones(1)])
expect("grouped reducescatter got 1 tensors but 2 names", _core.enqueue_grouped_reducescatter,
       ["a", "b"], [np.ones(2)], hvd.Sum, 1.0, 1.0)
expect("at least one dimension", _core.enqueue_grouped_reducescatter, ["s"], [np.float32(1)],
       hvd.Sum, 1.0, 1.0)
still_works("grouped")

hvd.shutdown()
print(f"rank {R}: ALL OK", flush=True)
