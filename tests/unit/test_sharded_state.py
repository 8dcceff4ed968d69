"""hvdlite.algorithms.sharded_state: the unsharded optimizer's numbering of parameter state,
to and from parameters."""

import numpy as np
import pytest

from hvdlite.algorithms.sharded_state import (bucket_has_state, gather_slots, number_state,
                                              state_by_param)
from hvdlite.algorithms.sharding import BucketPlan
from hvdlite.exceptions import HvdliteInvalidArgumentError


class P:
    """A parameter stand-in (matched by identity)."""


def test_numbering_round_trips():
    a, b, c = P(), P(), P()
    groups = [[a, b], [c]]
    full = number_state({id(a): {"m": 1}, id(c): {"m": 3}}, groups, [{"lr": 0.1}, {"lr": 0.2}])
    assert full == {"state": {0: {"m": 1}, 2: {"m": 3}},
                    "param_groups": [{"lr": 0.1, "params": [0, 1]}, {"lr": 0.2, "params": [2]}]}
    assert state_by_param(full, groups, "load") == {id(a): {"m": 1}, id(c): {"m": 3}}


def test_group_sizes_must_match():
    a, b = P(), P()
    full = {"state": {}, "param_groups": [{"params": [0]}]}
    with pytest.raises(HvdliteInvalidArgumentError,
                       match=r"load: the state dict has parameter groups of sizes \[1\]; this "
                             r"optimizer's groups have \[2\] parameters"):
        state_by_param(full, [[a, b]], "load")
    with pytest.raises(HvdliteInvalidArgumentError, match="sizes None"):
        state_by_param({"state": {}}, [[a]], "load")


def test_a_bucket_has_state_for_all_or_none():
    assert bucket_has_state(["w", "b"], [True, True], "load")
    assert not bucket_has_state(["w", "b"], [False, False], "load")
    with pytest.raises(HvdliteInvalidArgumentError, match=r"parameters \['b'\] have no "):
        bucket_has_state(["w", "b"], [True, False], "load")


@pytest.mark.parametrize("to", [0, None])
def test_gathered_slots_are_the_unsharded_pieces(ranks, to):
    shapes = [(2, 3), (), (4,)]
    whole = np.arange(11, dtype=np.float64)       # the unsharded state, packed
    pieces = BucketPlan(shapes, 1, 0).shaped(whole)
    fake = ranks(3)

    def rank(r):
        plan = BucketPlan(shapes, 3, r)
        shard = plan.fill_shard(np.zeros(plan.shard_numel), pieces)
        return gather_slots([plan], {(0, "m"): shard, (0, "v"): 2 * shard}, "zero.state",
                            None, to, r, lambda res: res.output)

    out = fake.run_ranks(rank)
    assert out[1] is None if to == 0 else out[1] is not None
    got = out[0]
    assert list(got) == [(0, "m"), (0, "v")]
    assert [p.shape for p in got[0, "m"]] == shapes
    assert all(np.array_equal(a, b) for a, b in zip(got[0, "m"], pieces))
    assert all(np.array_equal(a, 2 * b) for a, b in zip(got[0, "v"], pieces))
    assert [names for r, _, names in fake.calls if r == 0] == [["zero.state.0.m"],
                                                                ["zero.state.0.v"]]
