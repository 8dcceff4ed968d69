"""hvdlite.algorithms.powersgd: low-rank compression with error feedback, ranks as threads
over the fake collective layer."""

import numpy as np

from hvdlite.algorithms.powersgd import PowerSGDReducer
from hvdlite.policy import Average


def test_rank_one_gradients_come_through_exactly(ranks):
    fake = ranks(3)
    u = np.linspace(1.0, 2.0, 16)
    v = np.linspace(-1.0, 1.0, 12)

    def play(rank):
        g = ((rank + 1) * np.outer(u, v)).astype(np.float64)    # rank-1, scaled per rank
        reducer = PowerSGDReducer(rank=1)
        reducer.reduce([g], ["w"], Average)
        return g, reducer
    expect = 2 * np.outer(u, v)                                 # mean of 1, 2, 3 times
    results = fake.run_ranks(play)
    for g, reducer in results:
        np.testing.assert_allclose(g, expect, rtol=1e-9, atol=1e-12)
        assert reducer.qs["w"].shape == (12, 1)
    np.testing.assert_array_equal(results[0][1].qs["w"], results[2][1].qs["w"])


def test_error_holds_what_the_low_rank_step_missed(ranks):
    fake = ranks(2)

    def play(rank):
        g = np.random.default_rng(rank).standard_normal((20, 10))
        original = g.copy()
        reducer = PowerSGDReducer(rank=2)
        reducer.reduce([g], ["w"], Average)
        return original, reducer.errors["w"], g
    results = fake.run_ranks(play)
    for original, error, _ in results:
        approx = original - error
        assert np.linalg.matrix_rank(approx) <= 2
        assert np.linalg.norm(error) < np.linalg.norm(original)
    np.testing.assert_allclose(results[0][2], results[1][2])    # the same on every rank


def test_vectors_and_warmup_steps_go_dense(ranks):
    fake = ranks(2)

    def play(rank):
        bias = np.full(5, float(rank))
        early = np.full((8, 8), float(rank))
        reducer = PowerSGDReducer(rank=1, start_step=1)
        reducer.reduce([bias, early], ["b", "w"], Average)
        return bias, early, reducer.errors
    for bias, early, errors in fake.run_ranks(play):
        np.testing.assert_array_equal(bias, np.full(5, 0.5))
        np.testing.assert_array_equal(early, np.full((8, 8), 0.5))
        assert errors == {}
    assert PowerSGDReducer(rank=1).matrix_shape((4,)) is None
    assert PowerSGDReducer(rank=1).matrix_shape((8, 2, 3)) == (8, 6)


def test_q_is_restored_on_any_rank_and_errors_on_their_own():
    reducer = PowerSGDReducer(rank=1)
    reducer.qs["w"] = np.ones((3, 1))
    reducer.errors["w"] = np.ones((4, 3))
    sd = reducer.state_dict(rank=0, size=2)
    elsewhere = PowerSGDReducer(rank=1)
    elsewhere.load_state_dict(sd, 1, 2)
    assert "w" in elsewhere.qs and elsewhere.errors == {}


def test_matrices_keep_errors_and_start_from_a_seeded_q():
    r = PowerSGDReducer(rank=1, seed=3)
    assert r.keeps_error((8, 6), 2) and not r.keeps_error((8,), 2)
    assert r.initial_q("w", (8,), np.float32) is None
    q = r.initial_q("w", (8, 2, 3), np.float32)
    assert q.shape == (6, 1) and q.dtype == np.float32
    np.testing.assert_array_equal(q, PowerSGDReducer(rank=1, seed=3).initial_q("w", (8, 6),
                                                                               np.float32))
