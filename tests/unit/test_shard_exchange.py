"""hvdlite.algorithms.shard_exchange: the collectives of one sharded (ZeRO-1) step on host
arrays, at 3 thread-ranks: each rank gets its slice of the reduced buckets, the updated
shards come back whole, a branch that does not run sends nothing, and shards cut for
another size are refused by name."""

import numpy as np
import pytest

from hvdlite.algorithms import shard_exchange
from hvdlite.algorithms.shard_exchange import ShardExchange
from hvdlite.algorithms.sharding import BucketPlan
from hvdlite.exceptions import HvdliteInvalidArgumentError
from hvdlite.policy import Average, Sum

SHAPES = {"float32": [(2, 3), (1,)], "float64": [(4,)]}


class Set:
    """A process set stand-in over the fake ranks."""
    process_set_id = 1

    def __init__(self, fake, size=None):
        self.fake, self._size = fake, size

    def rank(self):
        return self.fake.rank()

    def size(self):
        return self.fake.size() if self._size is None else self._size


def _exchange(fake, rank, reduction=(Average, 1.0, 1.0), built_for=3, set_size=None):
    plans = [BucketPlan(SHAPES[d], 3, rank) for d in SHAPES]
    return ShardExchange(plans, list(SHAPES), "opt", reduction, Set(fake, set_size),
                         built_for, "DistributedOptimizer(opt)")


def _flats(rank):
    """Rank ``rank``'s padded flat gradient of each bucket."""
    return [np.arange(BucketPlan(SHAPES[d], 3, 0).padded, dtype=d) * (rank + 1) for d in SHAPES]


@pytest.mark.parametrize("op,pre,post,factor", [(Average, 1.0, 1.0, 2.0), (Sum, 1.0, 1.0, 6.0),
                                                (Average, 0.5, 2.0, 2.0)])
def test_each_rank_gets_its_slice_of_the_reduced_buckets(ranks, op, pre, post, factor):
    fake = ranks(3)

    def rank(r):
        ex = _exchange(fake, r, (op, pre, post))
        return ex, ex.reduce_scatter(True, *_flats(r))

    out = fake.run_ranks(rank)
    for r, (ex, shards) in enumerate(out):
        assert [((s.size,), str(s.dtype)) for s in shards] == ex.shard_specs()
        for plan, whole, shard in zip(ex.plans, _flats(0), shards):
            np.testing.assert_allclose(shard, factor * whole[plan.begin:plan.end])
    assert [names for r, _, names in fake.calls if r == 0] == [["opt.zero.grad.float32"],
                                                                ["opt.zero.grad.float64"]]


def test_updated_shards_come_back_whole(ranks):
    fake = ranks(3)

    def rank(r):
        ex = _exchange(fake, r)
        shards = [np.arange(p.begin, p.end, dtype=d) for p, d in zip(ex.plans, ex.dtypes)]
        return ex, ex.all_gather(True, *shards)

    for ex, buckets in fake.run_ranks(rank):
        assert [((b.size,), str(b.dtype)) for b in buckets] == ex.bucket_specs()
        assert all(np.array_equal(b, np.arange(p.padded)) for b, p in zip(buckets, ex.plans))
    assert {n for _, kind, names in fake.calls for n in names} == {
        "opt.zero.param.float32", "opt.zero.param.float64"}


def test_a_branch_that_does_not_run_sends_nothing(ranks):
    fake = ranks(3)
    fake._local.rank = 0
    ex = _exchange(fake, 0)
    assert [a.shape for a in ex.reduce_scatter(False, *_flats(0))] == [(3,), (2,)]
    assert [a.shape for a in ex.all_gather(False, np.ones(3), np.ones(2))] == [(9,), (6,)]
    assert fake.calls == []


def test_shards_cut_for_another_size_are_refused(ranks):
    fake = ranks(3)
    fake._local.rank = 0
    ex = _exchange(fake, 0, built_for=3, set_size=4)
    with pytest.raises(HvdliteInvalidArgumentError,
                       match=r"DistributedOptimizer\(opt\): the shards were cut for 3 ranks "
                             r"but the job now has 4 .* optimizer.reshard\(values\)"):
        ex.reduce_scatter(True, *_flats(0))
    assert fake.calls == []


class Recorder:
    """Works that say when they were started and waited for."""

    def __init__(self):
        self.events = []

    def start(self, i):
        self.events.append(("start", i))
        return i

    def wait(self, work):
        self.events.append(("wait", work))
        return f"result {work}"

    def wait_all(self, works):
        return [self.wait(w) for w in works]


def test_pipelined_keeps_two_buckets_in_flight(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(shard_exchange, "_ops", rec)
    shard_exchange.pipelined(3, rec.start, lambda i, r: rec.events.append(("use", i, r)))
    assert rec.events == [("start", 0), ("start", 1), ("wait", 0), ("use", 0, "result 0"),
                          ("start", 2), ("wait", 1), ("use", 1, "result 1"),
                          ("wait", 2), ("use", 2, "result 2")]


def test_after_an_error_nothing_is_left_in_flight(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(shard_exchange, "_ops", rec)

    def use(i, r):
        if i == 1:
            raise RuntimeError("copy failed")
    with pytest.raises(RuntimeError, match="copy failed"):
        shard_exchange.pipelined(4, rec.start, use)
    assert [e for e in rec.events if e[0] == "wait"] == [("wait", 0), ("wait", 1), ("wait", 2)]
    assert ("start", 3) not in rec.events

    rec.events.clear()
    with pytest.raises(RuntimeError, match="copy failed"):
        shard_exchange.wait_each([0, 1, 2, 3], use)
    assert rec.events == [("wait", 0), ("wait", 1), ("wait", 2), ("wait", 3)]


def test_wait_each_uses_every_result_in_order(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(shard_exchange, "_ops", rec)
    used = []
    shard_exchange.wait_each([5, 6], lambda i, r: used.append((i, r)))
    assert used == [(0, "result 5"), (1, "result 6")]
