"""hvdlite.elastic.optimizer_state: the commit rule of a sharded optimizer in elastic training
(commit whole, restore, sync root's copy, re-cut after a resize), with ranks as threads and a
fake sharded optimizer that speaks the protocol."""

import numpy as np

from fake_collectives import FakeCollectives

from hvdlite.elastic.optimizer_state import SYNC_NAME, OptimizerState

WHOLE = np.arange(12.0)     # the unsharded optimizer's state: 12 numbers


class FakeShardedOptimizer:
    """Holds this rank's slice of a 12-number state, cut for (rank, size) of ``fake``."""

    def __init__(self, fake, shard=None):
        self.fake = fake
        self.place = (fake.rank(), fake.size())
        self.shard = self._cut(WHOLE) if shard is None else shard
        self.resized = 0

    def _cut(self, whole):
        rank, size = self.place
        return np.array_split(np.asarray(whole), size)[rank].copy()

    def holds_shards(self):
        return True

    def consolidated(self):
        return np.concatenate(self.fake.run_collective_allgather(self.shard))

    def load_consolidated(self, whole):
        self.shard = self._cut(whole)

    def needs_reshard(self):
        return self.place != (self.fake.rank(), self.fake.size())

    def reshard(self, whole):
        self.place = (self.fake.rank(), self.fake.size())
        self.load_consolidated(whole)

    def job_resized(self):
        self.resized += 1


class Fake(FakeCollectives):
    def run_collective_allgather(self, shard):
        """Every rank's shard, in rank order (shards differ in length)."""
        return self._exchange(np.array(shard))


def test_commit_keeps_the_whole_state_and_restore_loads_it():
    fake = Fake(3)

    def rank(r):
        opt = FakeShardedOptimizer(fake)
        state = OptimizerState(opt, fake.broadcast_object)
        assert state.save()
        saved = state.saved.copy()
        opt.shard = opt.shard * 0 - 1          # steps after the commit, then a failure
        assert state.restore()
        return saved, opt.shard
    for r, (saved, shard) in enumerate(fake.run_ranks(rank)):
        np.testing.assert_array_equal(saved, WHOLE)
        np.testing.assert_array_equal(shard, np.array_split(WHOLE, 3)[r])


def test_sync_sends_roots_copy_to_every_rank_one_added_too():
    fake = Fake(3)

    def rank(r):
        # Rank 2 joined the job: no state, nothing committed yet.
        opt = FakeShardedOptimizer(fake, shard=np.zeros(0) if r == 2 else None)
        state = OptimizerState(opt, fake.broadcast_object)
        if r != 2:
            state.saved = WHOLE * 10             # root's (and rank 1's) last commit
        assert state.sync()
        return state.saved, opt.shard
    for r, (saved, shard) in enumerate(fake.run_ranks(rank)):
        np.testing.assert_array_equal(saved, WHOLE * 10)
        np.testing.assert_array_equal(shard, np.array_split(WHOLE * 10, 3)[r])
    assert sorted(c for c in fake.calls if c[1] == "broadcast_object") == [
        (r, "broadcast_object", [SYNC_NAME]) for r in range(3)]


def test_reset_recuts_the_shards_for_the_new_size():
    before, after = Fake(3), Fake(2)
    opts = before.run_ranks(lambda r: FakeShardedOptimizer(before))
    states = [OptimizerState(o, before.broadcast_object) for o in opts]
    for s in states:
        s.saved = WHOLE.copy()
    # Rank 2 is lost; ranks 0 and 1 stay, the rebuilt job has size 2.
    for o in opts[:2]:
        o.fake = after

    def rank(r):
        return states[r].reset(), opts[r].shard, opts[r].resized
    for r, (resharded, shard, resized) in enumerate(after.run_ranks(rank)):
        assert resharded and resized == 1
        np.testing.assert_array_equal(shard, np.array_split(WHOLE, 2)[r])
    # Same size again: nothing to re-cut, the size is still told.
    results = after.run_ranks(lambda r: (states[r].reset(), opts[r].resized))
    assert results == [(False, 2), (False, 2)]


class PlainOptimizer:
    """An optimizer without shards (e.g. Horovod's all-reduce DistributedOptimizer)."""

    def __init__(self):
        self.resized = 0

    def job_resized(self):
        self.resized += 1


def test_an_optimizer_without_shards_is_left_to_the_adapter():
    def no_broadcast(*args, **kwargs):
        raise AssertionError("nothing to broadcast")
    for opt in (None, PlainOptimizer(), object()):
        state = OptimizerState(opt, no_broadcast)
        assert not state.save() and state.saved is None
        assert not state.restore() and not state.sync() and not state.reset()
        if isinstance(opt, PlainOptimizer):
            assert opt.resized == 1


def test_a_keras_optimizer_not_built_yet_holds_no_shards():
    class NotBuilt(PlainOptimizer):
        def holds_shards(self):
            return False

        def consolidated(self):
            raise AssertionError("nothing to gather before the optimizer is built")
    state = OptimizerState(NotBuilt(), None)
    assert not state.save() and state.saved is None
