"""hvdlite.algorithms.sharded_state: the unsharded optimizer's numbering of parameter state,
to and from parameters."""

import pytest

from hvdlite.algorithms.sharded_state import bucket_has_state, number_state, state_by_param
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
