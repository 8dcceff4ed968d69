"""hvdlite.algorithms.held_state: a stateful reducer's step with its state handed in and out
as flat arrays (Keras' host call), at 2 thread-ranks over the fake collective layer: the
same result and state as the reducer keeping them itself; error buffers restored from
another rank restart at zero; a branch that does not run sends nothing."""

import numpy as np

from hvdlite.algorithms.error_feedback import TopKReducer
from hvdlite.algorithms.held_state import HeldStateStep, state_plan
from hvdlite.algorithms.powersgd import PowerSGDReducer
from hvdlite.policy import Average


def gradient(rank, step):
    return np.random.default_rng([rank, step]).standard_normal(40).astype(np.float32)


def _held_steps(rank, owner, steps=3):
    """``steps`` steps through HeldStateStep, the state carried as the adapter would."""
    step = HeldStateStep(TopKReducer(0.1), ["w"], [0], {"errors": {0: "E"}, "qs": {}},
                         (Average, 1.0, 1.0), (rank, 2))
    assert step.holders == ["E"]
    error, counter, out = np.zeros(40, np.float32), np.int32(0), []
    for t in range(steps):
        g, error, counter, owner = step(True, gradient(rank, t), error, counter, owner)
        out.append(g)
    return out, error, int(counter), tuple(owner)


def test_held_state_steps_equal_the_reducer_keeping_its_state(ranks):
    fake = ranks(2)

    def play(rank):
        reducer, plain = TopKReducer(0.1), []
        for t in range(3):
            g = gradient(rank, t)
            reducer.reduce([g], ["w"], Average)
            plain.append(g)
        return plain, reducer.errors["w"], reducer.step, _held_steps(rank, np.array([rank, 2]))

    for rank, (plain, error, step, held) in enumerate(fake.run_ranks(play)):
        got, held_error, held_step, owner = held
        assert all(np.array_equal(a, b) for a, b in zip(plain, got))
        assert np.array_equal(error, held_error) and held_step == step == 3
        assert owner == (rank, 2)


def test_error_buffers_of_another_rank_restart_at_zero(ranks):
    fake = ranks(2)
    stale = np.full(40, 100.0, np.float32)

    def play(rank):
        step = HeldStateStep(TopKReducer(0.1), ["w"], [0], {"errors": {0: "E"}, "qs": {}},
                             (Average, 1.0, 1.0), (rank, 2))
        elsewhere = step(True, gradient(rank, 0), stale, np.int32(0), np.array([1 - rank, 2]))
        fresh = step(True, gradient(rank, 0), np.zeros(40, np.float32), np.int32(0),
                     np.array([rank, 2]))
        return elsewhere, fresh

    for elsewhere, fresh in fake.run_ranks(play):
        assert all(np.array_equal(a, b) for a, b in zip(elsewhere, fresh))


def test_a_branch_that_does_not_run_returns_its_inputs(ranks):
    fake = ranks(2)
    step = HeldStateStep(TopKReducer(0.1), ["w"], [0], {"errors": {0: "E"}, "qs": {}},
                         (Average, 1.0, 1.0), (0, 2))
    arrays = [gradient(0, 0), np.ones(40, np.float32), np.int32(4), np.array([0, 2])]
    assert all(a is b for a, b in zip(step(False, *arrays), arrays))
    assert fake.calls == []


def test_the_holders_are_those_of_the_present_gradients_errors_first():
    step = HeldStateStep(PowerSGDReducer(1), ["a", "b", "c"], [0, 2],
                         {"errors": {0: "Ea", 1: "Eb", 2: "Ec"}, "qs": {2: "Qc"}},
                         (Average, 1.0, 1.0), (0, 1))
    assert step.holders == ["Ea", "Ec", "Qc"]
    assert step.held == [("errors", "a"), ("errors", "c"), ("qs", "c")]
    assert step.names == ["a", "c"]


def test_the_state_plan_follows_the_reducer():
    plan = state_plan(PowerSGDReducer(1), ["m", "v", "i"], [(8, 6), (3,), (8, 6)],
                      ["float32", "float32", "int32"], ("float32", "float64"), 2)
    (m_error, m_q), (v_error, v_q), (i_error, i_q) = plan
    assert m_error and m_q.shape == (6, 1) and m_q.dtype == np.float32
    assert (v_error, v_q) == (False, None)           # a vector goes whole
    assert (i_error, i_q) == (False, None)           # not a float: no state
    topk = state_plan(TopKReducer(0.1), ["w", "b"], [(40,), (2,)], ["float64"] * 2,
                      ("float32", "float64"), 2)
    assert topk == [(True, None), (False, None)]
