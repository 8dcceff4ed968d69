"""hvdlite.nested_state: a state_dict-like structure split into a skeleton and its tensors
(numpy arrays here), and joined back."""

import collections
import pickle

import numpy as np

from hvdlite import nested_state
from hvdlite.nested_state import TensorSlot


def is_array(x):
    return isinstance(x, np.ndarray)


Point = collections.namedtuple("Point", "x y")


def sample():
    return {"state": {0: {"step": 3, "exp_avg": np.arange(4.0)},
                      1: {"step": 3, "exp_avg": np.ones((2, 2), np.float32)}},
            "param_groups": [{"lr": 0.1, "params": [0, 1], "betas": (0.9, 0.99)}],
            "extra": (np.zeros(1, np.int64), "text", Point(1, 2))}


def test_split_puts_slots_in_traversal_order():
    skeleton, tensors = nested_state.split(sample(), is_array)
    assert [t.shape for t in tensors] == [(4,), (2, 2), (1,)]
    assert skeleton["state"][0]["exp_avg"] == TensorSlot(0, (4,), np.dtype(np.float64))
    assert skeleton["state"][1]["exp_avg"] == TensorSlot(1, (2, 2), np.dtype(np.float32))
    assert skeleton["extra"][0] == TensorSlot(2, (1,), np.dtype(np.int64))
    assert skeleton["param_groups"] == sample()["param_groups"]   # no tensors: as it was
    assert skeleton["extra"][2] == (1, 2) and hasattr(skeleton["extra"][2], "_fields")


def test_a_receiver_rebuilds_the_state_from_the_pickled_skeleton():
    state = sample()
    skeleton, tensors = nested_state.split(state, is_array)
    received = pickle.loads(pickle.dumps(skeleton))     # what broadcast_object delivers
    slots = nested_state.slots(received)
    assert [s.index for s in slots] == [0, 1, 2]
    fresh = [np.empty(s.shape, s.dtype) for s in slots]
    for mine, root in zip(fresh, tensors):               # what the broadcasts deliver
        mine[...] = root
    rebuilt = nested_state.join(received, fresh)
    np.testing.assert_array_equal(rebuilt["state"][1]["exp_avg"], state["state"][1]["exp_avg"])
    assert rebuilt["state"][0]["step"] == 3
    assert isinstance(rebuilt["extra"], tuple) and rebuilt["extra"][1] == "text"
    assert rebuilt["extra"][0].dtype == np.int64


def test_a_state_without_tensors_has_no_slots():
    skeleton, tensors = nested_state.split({"a": [1, 2], "b": None}, is_array)
    assert tensors == [] and nested_state.slots(skeleton) == []
    assert nested_state.join(skeleton, []) == {"a": [1, 2], "b": None}
