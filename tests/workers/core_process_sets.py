"""Process sets at 3 ranks: static and dynamic sets, overlapping and disjoint, every collective
in a set, sets that proceed independently, sets added and removed while collectives run in
others, a rank outside a set calling into it, and validation errors within a set.
"""
import os
import re
import threading
import time

import numpy as np

import hvdlite as hvd
from hvdlite import HvdliteInvalidArgumentError, HvdliteMismatchError, HvdliteShutdownError


def expect(exc_type, pattern, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except exc_type as e:
        assert re.search(pattern, str(e)), f"message {str(e)!r} does not match {pattern!r}"
        return str(e)
    raise AssertionError(f"{getattr(fn, '__name__', fn)} did not raise {exc_type.__name__}")


# --- Static sets (given to init), without dynamic sets ------------------------------------
os.environ.pop("HVDLITE_DYNAMIC_PROCESS_SETS", None)
os.environ.pop("HOROVOD_DYNAMIC_PROCESS_SETS", None)
static_02 = hvd.ProcessSet([2, 0])
hvd.init(process_sets=[static_02])
R, N = hvd.rank(), hvd.size()
assert N == 3, "this worker needs exactly 3 ranks"
assert static_02.ranks == [0, 2] and static_02.process_set_id == 1, static_02
assert hvd.global_process_set.ranks == [0, 1, 2] and hvd.global_process_set.size() == 3
assert static_02.included() == (R != 1) and static_02.size() == 2
if R != 1:
    assert static_02.rank() == [0, 2].index(R)
    got = hvd.allreduce(np.full(4, R + 1.0), op=hvd.Sum, process_set=static_02)
    assert (got == 1 + 3).all(), got
else:
    expect(ValueError, "not a member", static_02.rank)
expect(ValueError, "HVDLITE_DYNAMIC_PROCESS_SETS", hvd.add_process_set, [0, 1])
expect(ValueError, "HVDLITE_DYNAMIC_PROCESS_SETS", hvd.remove_process_set, static_02)
hvd.shutdown()

# A duplicate in init's list fails init on every rank.
expect(ValueError, "entry number 1 is a duplicate", hvd.init,
       process_sets=[hvd.ProcessSet([0, 1]), hvd.ProcessSet([1, 0])])
hvd.shutdown()

# --- Dynamic sets --------------------------------------------------------------------------
hvd.init(process_sets="dynamic")
assert hvd.rank() == R

# Overlapping sets: every pair of ranks; disjoint sets: {0} and {1, 2}.
pairs = {p: hvd.add_process_set(list(p)) for p in [(0, 1), (1, 2), (0, 2)]}
solo = hvd.add_process_set(hvd.ProcessSet([0]))
rest = pairs[(1, 2)]
ids = [ps.process_set_id for ps in list(pairs.values()) + [solo]]
assert ids == [1, 2, 3, 4], ids  # the same ids on every rank, in order
mine = [ps for ps in pairs.values() if ps.included()]
assert len(mine) == 2
for ps in pairs.values():
    assert ps.size() == 2 and ps.included() == (R in ps.ranks)

# Every collective in every set this rank belongs to, in set order.
for ps in mine + [solo] * solo.included():
    k, me = ps.size(), ps.rank()
    x = np.arange(6, dtype=np.float32) + R
    expected_sum = sum(np.arange(6, dtype=np.float32) + r for r in ps.ranks)
    assert (hvd.allreduce(x, op=hvd.Sum, process_set=ps) == expected_sum).all()
    assert np.array_equal(hvd.allreduce(x, process_set=ps), expected_sum / k)  # Average by set size
    assert (hvd.allreduce(np.int32([R]), op=hvd.Max, process_set=ps) == max(ps.ranks)).all()
    outs = hvd.grouped_allreduce([x, 2 * x], op=hvd.Sum, process_set=ps)
    assert (outs[0] == expected_sum).all() and (outs[1] == 2 * expected_sum).all()
    # allgather with a different first dimension per member
    got = hvd.allgather(np.full((R + 1, 2), R, np.int64), process_set=ps)
    want = np.concatenate([np.full((r + 1, 2), r, np.int64) for r in ps.ranks])
    assert np.array_equal(got, want), (got, want)
    # broadcast: the root is a global rank
    root = ps.ranks[-1]
    got = hvd.broadcast(np.full(3, float(R)), root_rank=root, process_set=ps)
    assert (got == root).all()
    y = np.full(2, R, np.int32)
    hvd.broadcast_(y, root_rank=ps.ranks[0], process_set=ps)
    assert (y == ps.ranks[0]).all()
    # alltoall: splits count members
    send = np.repeat(np.arange(k, dtype=np.int32)[:, None] + 10 * R, 2, axis=1)
    got = hvd.alltoall(send, process_set=ps)
    assert np.array_equal(got[:, 0], np.array([10 * r + me for r in ps.ranks], np.int32)), got
    got, splits = hvd.alltoall(np.arange(k, dtype=np.float64), splits=[1] * k, process_set=ps)
    assert list(splits) == [1] * k
    # reducescatter: dimension 0 split among members
    got = hvd.reducescatter(np.ones((2 * k + 1, 3), np.float32), op=hvd.Sum, process_set=ps)
    assert got.shape == (2 + (me == 0), 3) and (got == k).all(), got
    hvd.barrier(process_set=ps)
    # The grouped bindings take the set too (members negotiate in one round).
    from hvdlite import ops
    inputs = [np.full((1, 2), R + i, np.int16) for i in range(2)]
    work = ops.grouped_allgather_async(inputs, [f"ga.{i}" for i in range(2)], process_set=ps)
    for i, res in enumerate(ops.wait_all(work)):
        assert np.array_equal(res.output[:, 0], np.array(ps.ranks, np.int16) + i), res
    inputs = [np.ones((k, 3), np.float32) for _ in range(2)]
    work = ops.grouped_reducescatter_async(inputs, [f"grs.{i}" for i in range(2)], op=hvd.Sum,
                                           process_set=ps)
    assert all((res.output == k).all() and res.output.shape == (1, 3) for res in ops.wait_all(work))
    # Unnamed collectives are numbered per set, so members agree whatever else they ran.
    h = hvd.allreduce_async(np.ones(1), op=hvd.Sum, process_set=ps)
    assert hvd.synchronize(h)[0] == k

# The same name in flight in two sets at once is fine: names are per set.
hs = [hvd.allreduce_async(np.ones(2), name="same.name", op=hvd.Sum, process_set=ps) for ps in mine]
assert all((hvd.synchronize(h) == 2).all() for h in hs)

# Disjoint sets proceed independently: rank 0 waits in a global collective that ranks 1 and 2
# reach only after finishing a collective among themselves.
if R == 0:
    hvd.allreduce(np.ones(1), name="after.rest", op=hvd.Sum)
else:
    for i in range(20):
        assert hvd.allreduce(np.ones(8), op=hvd.Sum, name=f"rest.{i}", process_set=rest)[0] == 2
    hvd.allreduce(np.ones(1), name="after.rest", op=hvd.Sum)

# Overlapping sets proceed independently: rank 1 has a pending collective in {0, 1} (rank 0
# submits it only later) while it completes one in {1, 2}.
p01, p12 = pairs[(0, 1)], pairs[(1, 2)]
if R == 1:
    pending = hvd.allreduce_async(np.ones(3), name="late", op=hvd.Sum, process_set=p01)
    assert hvd.allreduce(np.ones(3), name="now", op=hvd.Sum, process_set=p12)[0] == 2
    hvd.barrier()
    assert (hvd.synchronize(pending) == 2).all()
elif R == 2:
    assert hvd.allreduce(np.ones(3), name="now", op=hvd.Sum, process_set=p12)[0] == 2
    hvd.barrier()
else:
    hvd.barrier()
    assert (hvd.allreduce(np.ones(3), name="late", op=hvd.Sum, process_set=p01) == 2).all()

# A rank outside a set gets a clear error naming the set and its ranks; nothing is sent.
if not p12.included():
    msg = expect(HvdliteInvalidArgumentError, r"rank 0 is not a member of process set 2 \(ranks \[1, 2\]\)",
                 hvd.allreduce, np.ones(2), name="outsider", process_set=p12)
    assert "'outsider'" in msg
    expect(HvdliteInvalidArgumentError, "not a member", hvd.allgather, np.ones(2), process_set=p12)
    expect(HvdliteInvalidArgumentError, "not a member", hvd.barrier, process_set=p12)
    expect(ValueError, "not a member", p12.rank)
# Broadcast roots must belong to the set.
if p01.included():
    expect(HvdliteInvalidArgumentError, "root rank 2 is not a member of process set 1",
           hvd.broadcast, np.ones(2), 2, process_set=p01)

# Validation errors within a set reach every member and name the set and global ranks.
p02 = pairs[(0, 2)]
if p02.included():
    msg = expect(HvdliteMismatchError, r"Mismatched shapes for allreduce of tensor 'bad\.shape' in "
                 r"process set 3 \(ranks 0, 2\)", hvd.allreduce, np.ones(2 + R), name="bad.shape",
                 process_set=p02)
    assert "rank 0 has [2]" in msg and "rank 2 has [4]" in msg, msg
    expect(HvdliteMismatchError, "Mismatched data types", hvd.allgather,
           np.ones(2, np.float32 if R == 0 else np.float64), name="bad.dtype", process_set=p02)
    expect(HvdliteMismatchError, "Mismatched root ranks", hvd.broadcast, np.ones(2), R,
           name="bad.root", process_set=p02)
    assert hvd.allreduce(np.ones(1), op=hvd.Sum, process_set=p02)[0] == 2  # still usable
hvd.barrier()

# Adding: a duplicate and mismatched ranks fail on every rank; the table stays usable.
expect(ValueError, "duplicate process set", hvd.add_process_set, [2, 1])
expect(ValueError, "duplicate process set", hvd.add_process_set, [0, 1, 2])
expect(HvdliteMismatchError, "Mismatched process set ranks", hvd.add_process_set, [0, 1] if R == 0 else [0, 2])
expect(ValueError, "out of range", hvd.add_process_set, [0, 3])

# Sets added and removed while collectives run in other sets: ranks 1 and 2 keep all-reducing
# in `rest` from a second thread while every rank changes the table.
errors = []


def keep_reducing():
    try:
        for i in range(40):
            got = hvd.allreduce(np.full(1000, i, np.float32), op=hvd.Sum, name=f"bg.{i}",
                                process_set=rest)
            assert (got == 2 * i).all()
    except Exception as e:  # noqa: BLE001 - reported by the main thread
        errors.append(e)


worker = threading.Thread(target=keep_reducing) if rest.included() else None
if worker:
    worker.start()
for round_ in range(5):
    extra = hvd.add_process_set([1] if round_ % 2 else [2])
    assert extra.process_set_id == 5  # the id freed last round comes back
    if extra.included():
        assert hvd.allreduce(np.ones(2), op=hvd.Sum, process_set=extra)[0] == extra.size()
    assert hvd.remove_process_set(extra)
    assert extra.process_set_id is None
if worker:
    worker.join()
assert not errors, errors

# Removing: ids are reused, collectives on a removed set fail, pending ones fail on removal.
removed_id = p02.process_set_id
assert hvd.remove_process_set(p02) and not hvd.remove_process_set(p02)
assert not hvd.remove_process_set(hvd.global_process_set)
expect(ValueError, "has not been added", hvd.allreduce, np.ones(1), process_set=p02)
expect(HvdliteInvalidArgumentError, f"process set {removed_id} does not exist", hvd.allreduce,
       np.ones(1), process_set=removed_id)
# Freed ids come back oldest first (as in Horovod): 5 (freed above), then 3.
again = hvd.add_process_set([0, 2])
single = hvd.add_process_set([1])
assert (again.process_set_id, single.process_set_id) == (5, removed_id), (again, single)
if p01.included():
    # Only rank 0 submits; removing the set fails the request on rank 0 with a clear error.
    h = hvd.allreduce_async(np.ones(1), name="orphan", process_set=p01) if R == 0 else None
    hvd.barrier()
    hvd.remove_process_set(p01)
    if h is not None:
        expect(HvdliteShutdownError, r"process set 1 \(ranks 0, 1\)[^']*removed", hvd.synchronize, h)
else:
    hvd.barrier()
    hvd.remove_process_set(p01)

for ps in (pairs[(1, 2)], solo, again, single):
    assert hvd.remove_process_set(ps)
assert hvd.global_process_set.size() == 3
hvd.shutdown()
print(f"rank {R}: ALL OK", flush=True)
