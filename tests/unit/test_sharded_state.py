"""hvdlite.algorithms.sharded_state: the unsharded optimizer's numbering of parameter state,
to and from parameters."""

import numpy as np
import pytest

from hvdlite.algorithms.sharded_state import (broadcast_state, bucket_has_state,
                                              cut_consolidated,
                                              gather_slots, number_state, per_element,
                                              shard_state, slot_key, state_by_param,
                                              unsharded_layout)
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


def test_per_element_state_is_told_by_a_parameter_with_a_dimension():
    states = [{"step": 3.0, "m": np.zeros(())}, {"step": 3.0, "m": np.zeros((2, 2))}]
    assert per_element("m", [(), (2, 2)], states)
    assert not per_element("step", [(), (2, 2)], states)
    assert not per_element("m", [(), (2, 2)], [states[0], {"m": np.zeros(4)}])
    # only 0-d parameters: every key but "step" is per element
    assert per_element("m", [()], states[:1]) and not per_element("step", [()], states[:1])


@pytest.mark.parametrize("rank", [0, 1, 2])
def test_a_shard_state_is_this_ranks_slice_of_the_pieces(rank):
    shapes = [(2, 3), (), (4,)]
    plan = BucketPlan(shapes, 3, rank)
    whole = np.arange(11, dtype=np.float32)
    pieces = BucketPlan(shapes, 1, 0).shaped(whole)
    states = [{"step": 5, "m": p} for p in pieces]
    st = shard_state(plan, ["w", "s", "b"], states,
                     lambda n, like: np.full(n, -1, like.dtype), lambda v: v + 1, "load")
    assert st["step"] == 6                        # copied from the first parameter
    assert st["m"].dtype == np.float32
    padded = np.concatenate([whole, -np.ones(plan.padded - 11, np.float32)])
    assert np.array_equal(st["m"], padded[plan.begin:plan.end])
    assert shard_state(plan, ["w", "s", "b"], [None] * 3, None, None, "load") is None
    with pytest.raises(HvdliteInvalidArgumentError, match=r"load: parameters \['s'\]"):
        shard_state(plan, ["w", "s", "b"], [states[0], None, states[2]], None, None, "load")


def test_slot_names_find_their_shard():
    prefixes = ["opt_shard_float32", "opt_shard_float64"]
    assert slot_key("opt_shard_float64_momentum", prefixes) == (1, "momentum")
    assert slot_key("opt_shard_float32_velocity_hat", prefixes) == (0, "velocity_hat")
    assert slot_key("iterations", prefixes) is None
    assert slot_key("a_b_m", ["a", "a_b"]) is None            # ambiguous: refused


def test_the_unsharded_layout_places_every_variable():
    keys, prefixes = [(0, "m"), (1, "m")], [["dense_kernel", "dense_bias"], ["emb"]]
    layout = unsharded_layout(["iterations", "lr", "dense_kernel_m", "emb_m", "dense_bias_m"],
                              2, 2, keys, prefixes, "X: the unsharded Adam")
    assert layout == [("own", 0), ("own", 1), ("slot", (0, "m"), 0), ("slot", (1, "m"), 0),
                      ("slot", (0, "m"), 1)]
    with pytest.raises(HvdliteInvalidArgumentError,
                       match="X: the unsharded Adam has variable 'dense_kernel_v', which "
                             "matches no slot of the shards"):
        unsharded_layout(["iterations", "dense_kernel_v"], 1, 1, keys, prefixes,
                         "X: the unsharded Adam")
    with pytest.raises(HvdliteInvalidArgumentError,
                       match="X: the unsharded Adam has 1 variables before build, this one 2"):
        unsharded_layout(["iterations", "emb_m"], 1, 2, keys, prefixes, "X: the unsharded Adam")


@pytest.mark.parametrize("size", [1, 2, 3])
def test_consolidated_values_cut_into_shards_and_back(size):
    shapes = [(2, 3), (4,)]
    layout = [("own", 0), ("slot", (0, "m"), 0), ("slot", (0, "m"), 1)]
    kernel, bias = np.arange(6.0).reshape(2, 3), np.arange(4.0) + 10
    shards = []
    for r in range(size):
        plan = BucketPlan(shapes, size, r)
        own, cut = cut_consolidated(layout, [7, kernel, bias], [plan], ["float32"], [(0, "m")],
                                    [["kernel", "bias"]], "X: load", "the unsharded SGD")
        assert list(own) == [0] and own[0] == 7
        assert cut[0, "m"].dtype == np.float32 and cut[0, "m"].shape == (plan.shard_numel,)
        shards.append(cut[0, "m"])
    got = BucketPlan(shapes, 1, 0).shaped(np.concatenate(shards))
    assert np.array_equal(got[0], kernel) and np.array_equal(got[1], bias)


def test_consolidated_values_are_checked():
    plan = BucketPlan([(2, 3)], 2, 0)
    layout = [("own", 0), ("slot", (0, "m"), 0)]
    args = ([plan], ["float32"], [(0, "m")], [["dense/kernel"]], "X: load", "the unsharded SGD")
    with pytest.raises(HvdliteInvalidArgumentError,
                       match="X: load: got 1 values; the unsharded SGD has 2"):
        cut_consolidated(layout, [1], *args)
    with pytest.raises(HvdliteInvalidArgumentError,
                       match=r"X: load: the m of dense/kernel has shape \(3, 2\); the "
                             r"variable has \(2, 3\)"):
        cut_consolidated(layout, [1, np.zeros((3, 2))], *args)


def test_broadcast_state_gathers_with_roots_keys_and_loads_everywhere(ranks):
    fake = ranks(3)

    def rank(r):
        loaded, asked = [], []

        def consolidate(root, keys):
            asked.append((root, keys))          # every rank gathers with root's keys
            return {"from": r} if r == root else None

        broadcast_state(r, 1, lambda: ["m", "v"] if r == 1 else 1 / 0, consolidate,
                        loaded.append)
        return asked, loaded

    for asked, loaded in fake.run_ranks(rank):
        assert asked == [(1, ["m", "v"])] and loaded == [{"from": 1}]
    assert [names for r, _, names in fake.calls if r == 0] == [
        ["zero.broadcast_state.keys"], ["zero.broadcast_state"]]


def test_slots_are_named_after_their_reference_path_or_name():
    from types import SimpleNamespace
    from hvdlite.algorithms.sharded_state import reference_prefix
    assert reference_prefix(SimpleNamespace(path="sgd/hvdlite_shard_float32")) == \
        "sgd_hvdlite_shard_float32"
    assert reference_prefix(SimpleNamespace(name="dense/kernel:0")) == "dense_kernel_0"
    assert slot_key(reference_prefix(SimpleNamespace(path="a/b")) + "_momentum",
                    ["a_b", "a_c"]) == (0, "momentum")
