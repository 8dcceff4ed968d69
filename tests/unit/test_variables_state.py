"""hvdlite.elastic.variables_state: commit copies the variables' values, restore assigns them
back (zeros for variables made since), sync broadcasts rank 0's and commits them. Ranks are
threads over the fake collective layer; variables are numpy stand-ins."""

import numpy as np

from fake_collectives import FakeCollectives

from hvdlite.elastic.variables_state import VariablesState


class Variable:
    """What the state needs of a variable: ``numpy.array(v)``, ``shape`` and ``assign``."""

    def __init__(self, value):
        self.value = np.array(value, dtype=np.float32)
        self.shape = self.value.shape

    def __array__(self, dtype=None, copy=None):
        return self.value.copy() if dtype is None else self.value.astype(dtype)

    def assign(self, value):
        self.value = np.array(value, dtype=self.value.dtype)


class ListState(VariablesState):
    def __init__(self, variables, fake, **kwargs):
        self.variables = variables

        def broadcast_variables(vs, root_rank):
            for v, value in zip(vs, fake.broadcast_object([np.array(v) for v in vs],
                                                           root_rank)):
                v.assign(value)
        super().__init__(broadcast_variables, fake.broadcast_object, fake.rank, **kwargs)

    def _variables(self):
        return self.variables


def test_restore_goes_back_to_the_commit_and_zeroes_variables_made_since():
    fake = FakeCollectives(1)

    def rank(r):
        w = Variable([1.0, 2.0])
        state = ListState([w], fake, epoch=0)
        w.assign([5.0, 5.0])
        state.epoch = 3
        state.save()
        w.assign([7.0, 7.0])
        state.epoch = 4
        slot = Variable([9.0, 9.0, 9.0])     # e.g. an optimizer built after the commit
        state.variables.append(slot)
        state.restore()
        return w.value, slot.value, state.epoch
    w, slot, epoch = fake.run_ranks(rank)[0]
    np.testing.assert_array_equal(w, [5.0, 5.0])
    np.testing.assert_array_equal(slot, [0.0, 0.0, 0.0])
    assert epoch == 3


def test_sync_takes_rank_0s_values_and_commits_them():
    fake = FakeCollectives(3)

    def rank(r):
        w = Variable([float(r)] * 2)
        state = ListState([w], fake, batch=r)
        state.sync()
        w.assign([-1.0, -1.0])
        state.restore()                      # back to what sync committed
        return w.value, state.batch
    for w, batch in fake.run_ranks(rank):
        np.testing.assert_array_equal(w, [0.0, 0.0])
        assert batch == 0
