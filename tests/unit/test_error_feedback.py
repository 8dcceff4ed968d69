"""hvdlite.algorithms.error_feedback: the plain, 16-bit-cast and top-k reducers, ranks as
threads over the fake collective layer."""

import numpy as np
import pytest

from hvdlite.algorithms.error_feedback import CastReducer, GradientReducer, TopKReducer
from hvdlite.exceptions import HvdliteInvalidArgumentError
from hvdlite.policy import Average, Max, Sum


def gradients(rank, shape=(40,), seed=0):
    return np.random.default_rng([seed, rank]).standard_normal(shape).astype(np.float32)


def test_plain_reducer_averages_and_sums(ranks):
    fake = ranks(3)
    expect = sum(gradients(r) for r in range(3))

    def play(rank):
        avg, total = gradients(rank), gradients(rank)
        reducer = GradientReducer()
        reducer.reduce([avg], ["w"], Average)
        reducer.reduce([total], ["w"], Sum, prescale=2.0, postscale=0.5)
        return avg, total, reducer.step
    for avg, total, step in fake.run_ranks(play):
        np.testing.assert_allclose(avg, expect / 3, rtol=1e-6)
        np.testing.assert_allclose(total, expect, rtol=1e-6)
        assert step == 2


def test_reducers_refuse_what_they_cannot_reduce(ranks):
    ranks(1)
    with pytest.raises(HvdliteInvalidArgumentError, match="op must be Average or Sum"):
        GradientReducer().reduce([gradients(0)], ["w"], Max)
    with pytest.raises(HvdliteInvalidArgumentError, match="'w' must be a contiguous float32"):
        GradientReducer().reduce([np.arange(3)], ["w"])
    with pytest.raises(ValueError, match="2 gradients but 1 names"):
        GradientReducer().reduce([gradients(0), gradients(0)], ["w"])


def test_cast_error_is_what_rounding_dropped(ranks):
    fake = ranks(2)

    def play(rank):
        g = gradients(rank) * np.float32(1e-3)
        original = g.copy()
        reducer = CastReducer("fp16")
        reducer.reduce([g], ["w"], Average)
        return original, g, reducer.errors["w"]
    results = fake.run_ranks(play)
    sent = [orig - err for orig, _, err in results]
    for orig, _, err in results:
        rounded = orig.astype(np.float16).astype(np.float32)
        np.testing.assert_array_equal(orig - err, rounded)     # error + sent == gradient
    for _, reduced, _ in results:
        np.testing.assert_allclose(reduced, (sent[0] + sent[1]) / 2, rtol=1e-3, atol=1e-7)


def test_topk_sends_the_largest_and_keeps_the_rest(ranks):
    fake = ranks(2)
    grads = [gradients(r, (100,)) for r in range(2)]

    def play(rank):
        g = grads[rank].copy()
        reducer = TopKReducer(0.1)
        reducer.reduce([g], ["w"], Average)
        return g, reducer.errors["w"]
    results = fake.run_ranks(play)
    sent = []
    for rank, (_, err) in enumerate(results):
        s = grads[rank] - err
        assert np.count_nonzero(s) == 10                    # k = ceil(0.1 * 100)
        kept = np.abs(grads[rank])[s != 0]
        assert kept.min() >= np.abs(grads[rank])[s == 0].max()
        sent.append(s)
    for reduced, _ in results:
        np.testing.assert_allclose(reduced, (sent[0] + sent[1]) / 2, rtol=1e-6)
    assert results[0][0].tobytes() == results[1][0].tobytes()   # identical on every rank


def test_topk_small_tensors_go_whole(ranks):
    fake = ranks(2)

    def play(rank):
        g = gradients(rank, (4,))
        TopKReducer(0.5).reduce([g], ["b"], Sum)
        return g
    expect = gradients(0, (4,)) + gradients(1, (4,))
    for g in fake.run_ranks(play):
        np.testing.assert_allclose(g, expect, rtol=1e-6)


def test_state_dict_restores_errors_on_the_same_rank_only():
    reducer = TopKReducer(0.1)
    reducer.errors["w"] = np.ones(3, np.float32)
    reducer.step = 7
    sd = reducer.state_dict(rank=1, size=4)
    same, other = TopKReducer(0.1), TopKReducer(0.1)
    same.load_state_dict(sd, 1, 4)
    other.load_state_dict(sd, 0, 4)
    assert same.step == other.step == 7
    assert "w" in same.errors and other.errors == {}


def test_topk_velocities_belong_to_their_rank():
    reducer = TopKReducer(0.1, momentum=0.9)
    reducer.velocities["w"] = np.ones(3)
    sd = reducer.state_dict(rank=0, size=2)
    same, other = TopKReducer(0.1, momentum=0.9), TopKReducer(0.1, momentum=0.9)
    same.load_state_dict(sd, 0, 2)
    other.load_state_dict(sd, 1, 2)
    assert np.array_equal(same.velocities["w"], np.ones(3)) and other.velocities == {}


def test_reduce_with_state_equals_a_reducer_that_keeps_it(ranks):
    """The Keras path hands the state in and out; two steps give what two steps of a
    reducer keeping its own state give, and the reducer is left holding nothing."""
    fake = ranks(2)

    def play(rank):
        kept, handed = TopKReducer(0.1), TopKReducer(0.1)
        errors, qs, step = {}, {}, 0
        outs = []
        for seed in (0, 1):
            a, b = gradients(rank, seed=seed), gradients(rank, seed=seed)
            kept.reduce([a], ["w"], Average)
            errors, qs, step = handed.reduce_with_state([b], ["w"], errors, qs, step,
                                                        Average, 1.0, 1.0)
            outs.append((a, b))
        return outs, kept.errors, errors, step, handed.errors
    for outs, kept_errors, errors, step, left in fake.run_ranks(play):
        for a, b in outs:
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(kept_errors["w"], errors["w"])
        assert step == 2 and left == {}


def test_which_tensors_keep_an_error_buffer():
    assert not GradientReducer().keeps_error((40,), 2)
    assert CastReducer("fp16").keeps_error((1,), 2)
    assert TopKReducer(0.1).keeps_error((40,), 2)           # k=4, 4*2 < 40
    assert not TopKReducer(0.1).keeps_error((2,), 2)        # k=1, 1*2 = 2: goes whole
    assert GradientReducer().initial_q("w", (4, 4), np.float32) is None
