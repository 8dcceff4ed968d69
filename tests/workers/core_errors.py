"""Every error case: local bad input raises before anything is sent; cross-rank mismatches
raise on every rank with the tensor, the values and the ranks named; the job stays usable.
Needs at least 2 ranks.
"""
import re
import threading

import numpy as np

import hvdlite as hvd
from hvdlite import (HvdliteInvalidArgumentError, HvdliteMismatchError, HvdliteNotInitializedError,
                     HvdliteShutdownError)


def expect(exc_type, pattern, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc_type as e:
        assert re.search(pattern, str(e)), f"message {str(e)!r} does not match {pattern!r}"
        return str(e)
    raise AssertionError(f"{fn.__name__} did not raise {exc_type.__name__}")


# Before init.
expect(HvdliteNotInitializedError, "init", hvd.allreduce, np.ones(2))
expect(HvdliteNotInitializedError, "init", hvd.rank)

hvd.init()
R, N = hvd.rank(), hvd.size()
assert N >= 2


def still_works(tag):
    got = hvd.allreduce(np.ones(3, np.float32), op=hvd.Sum, name=f"ok.{tag}")
    assert (got == N).all(), got


# Local errors: raised at once, nothing sent (the other ranks do not take part).
expect(HvdliteInvalidArgumentError, r"'bad\.dtype'.*unsupported dtype complex64", hvd.allreduce,
       np.ones(2, np.complex64), name="bad.dtype")
msg = expect(HvdliteInvalidArgumentError, "unsupported dtype uint32", hvd.allgather, np.ones(2, np.uint32))
assert all(d in msg for d in hvd._core.supported_dtypes()) and "int16" in msg, msg
expect(HvdliteInvalidArgumentError, r"'strided'.*not contiguous", hvd.allreduce_,
       np.ones((4, 4), np.float32)[:, ::2], name="strided")
expect(HvdliteInvalidArgumentError, "not contiguous", hvd.broadcast_, np.ones((4, 4)).T, 0)
expect(HvdliteInvalidArgumentError, "root rank 99 is out of range", hvd.broadcast, np.ones(2), 99)
expect(HvdliteInvalidArgumentError, "splits", hvd.alltoall, np.ones(5), splits=[1] * (N + 1))
expect(HvdliteInvalidArgumentError, "not divisible", hvd.alltoall, np.ones(N + 1))
expect(HvdliteInvalidArgumentError, "bool", hvd.allreduce, np.ones(2, bool))  # Average of bool
# Adasum: floating-point tensors only (and a power of two of ranks: tests/test_adasum.py).
expect(HvdliteInvalidArgumentError, "Adasum", hvd.allreduce, np.ones(2, np.int32), op=hvd.Adasum)
expect(HvdliteInvalidArgumentError, "at least one dimension", hvd.reducescatter, np.float32(1.0))
# A name that is not valid UTF-8 (a lone surrogate), by every way names come in.
for call in (lambda n: hvd.allreduce(np.ones(2), name=n), lambda n: hvd.allreduce_async(np.ones(2), name=n),
             lambda n: hvd.grouped_allreduce([np.ones(2)], name=n), lambda n: hvd.allgather(np.ones(2), name=n),
             lambda n: hvd.broadcast(np.ones(2), 0, name=n), lambda n: hvd.alltoall(np.ones(N), name=n),
             lambda n: hvd.reducescatter(np.ones(N), name=n), lambda n: hvd.allgather_object(1, name=n)):
    expect(HvdliteInvalidArgumentError, r"the name 'bad\\udcff(\.0)?' is not valid UTF-8", call, "bad\udcff")
# 'dup' stays in flight on rank 0 until the others submit it, after the barrier (submitted by
# every rank at once, it could finish before the second submission on a fast path).
if R == 0:
    h = hvd.allreduce_async(np.ones(2), name="dup")
    expect(HvdliteInvalidArgumentError, r"'dup' is already in flight", hvd.allreduce_async,
           np.ones(2), name="dup")
    hvd.barrier()
else:
    hvd.barrier()
    h = hvd.allreduce_async(np.ones(2), name="dup")
handle = int(h)  # Horovod's int handle
hvd.synchronize(handle)
assert hvd.poll(h)  # a finished Work reports done; its int handle is gone
expect(HvdliteInvalidArgumentError, "unknown handle", hvd.poll, handle)
still_works("local")

# Cross-rank mismatches: every rank gets the error, naming tensor, values and ranks.
msg = expect(HvdliteMismatchError, r"Mismatched shapes for allreduce of tensor 'm\.shape'", hvd.allreduce,
             np.ones(2 + (R == 1), np.float32), name="m.shape")
assert "rank 1 has [3]" in msg and ("rank 0 has [2]" in msg or "ranks 0" in msg), msg
still_works("shape")
expect(HvdliteMismatchError, r"data types.*'m\.dtype'.*float32.*float64", hvd.allreduce,
       np.ones(2, np.float64 if R == 1 else np.float32), name="m.dtype")
expect(HvdliteMismatchError, r"reduce ops.*'m\.op'.*Max", hvd.allreduce, np.ones(2),
       op=hvd.Max if R == 1 else hvd.Sum, name="m.op")
expect(HvdliteMismatchError, r"prescale factors.*'m\.scale'", hvd.allreduce, np.ones(2),
       prescale_factor=2.0 if R == 1 else 1.0, name="m.scale")
expect(HvdliteMismatchError, r"root ranks.*'m\.root'", hvd.broadcast, np.ones(2),
       1 if R == 1 else 0, name="m.root")
expect(HvdliteMismatchError, r"operations.*'m\.kind'.*allgather", lambda: hvd.allgather(np.ones(2), name="m.kind")
       if R == 1 else hvd.allreduce(np.ones(2), name="m.kind"))
expect(HvdliteMismatchError, r"shapes beyond dimension 0.*'m\.gather'", hvd.allgather,
       np.ones((2, 3 + (R == 1))), name="m.gather")
still_works("mismatches")

# A name that took the cached fast path, then changes shape on one rank only.
for _ in range(2):
    hvd.allreduce(np.ones(4), name="cached")
expect(HvdliteMismatchError, r"shapes.*'cached'", hvd.allreduce, np.ones(4 + (R == 1)), name="cached")
got = hvd.allreduce(np.ones(4), op=hvd.Sum, name="cached")
assert (got == N).all()
still_works("cache")

# An object collective whose pickling fails on some ranks fails on every rank, naming each of
# them and its error (the failed rank's own error chained), and the next call works.
lock = threading.Lock()  # cannot be pickled
failed = " ".join(rf"rank {r} could not pickle its object \(TypeError: .*lock.*\)" for r in range(1, N))
msg = expect(HvdliteInvalidArgumentError, r"allgather_object 'obj\.gather': " + failed.replace(" rank", ".* rank"),
             hvd.allgather_object, lock if R > 0 else R, name="obj.gather")
assert "rank 0 " not in msg, msg
expect(HvdliteInvalidArgumentError, r"broadcast_object 'obj\.bcast': rank 1 could not pickle its object",
       hvd.broadcast_object, lock if R == 1 else None, root_rank=1, name="obj.bcast")
try:
    hvd.broadcast_object(lock if R == 1 else None, root_rank=1)
    raise AssertionError("broadcast_object of a lock did not raise")
except HvdliteInvalidArgumentError as e:
    assert "rank 1 could not pickle" in str(e), e
    assert isinstance(e.__cause__, TypeError) == (R == 1), repr(e.__cause__)
assert hvd.allgather_object(R, name="obj.ok") == list(range(N))
assert hvd.broadcast_object("x" if R == 0 else None, name="obj.ok2") == "x"
still_works("objects")

# After join, only all-reduce continues: a broadcast against a joined rank fails clearly.
if R == 0:
    hvd.join()
else:
    expect(HvdliteInvalidArgumentError, r"broadcast of tensor 'after\.join'.*rank 0 already joined",
           hvd.broadcast, np.ones(2), 1, name="after.join")
    hvd.join()
still_works("join")

# A rank that shuts down fails the others' pending requests instead of hanging them.
if R == 0:
    hvd.shutdown()
    expect(HvdliteNotInitializedError, "init", hvd.allreduce, np.ones(2))
else:
    # The error names the rank that left.
    expect(HvdliteShutdownError, r"shut down: rank 0 called hvdlite\.shutdown\(\) or exited.*'orphan'",
           hvd.allreduce, np.ones(2), name="orphan")
    expect(HvdliteShutdownError, "shut down", hvd.allreduce, np.ones(2), name="later")
    hvd.shutdown()
print(f"rank {R}: ALL OK", flush=True)
