"""hvdlite.algorithms.batch_norm: the ranks' per-channel moments pooled into the global
batch's, checked against numpy over the concatenated batch."""

import numpy as np
import pytest

from hvdlite.algorithms.batch_norm import pooled_moments


def rank_stats(batch):
    """What each rank all-gathers: (count, mean, M2) per channel of its (N, C) batch."""
    if len(batch) == 0:
        return 0.0, np.zeros(batch.shape[1]), np.zeros(batch.shape[1])
    mean = batch.mean(0)
    return float(len(batch)), mean, ((batch - mean) ** 2).sum(0)


def pool(batches):
    stats = [rank_stats(b) for b in batches]
    return pooled_moments(np.array([s[0] for s in stats]), np.stack([s[1] for s in stats]),
                          np.stack([s[2] for s in stats]), batches[0].shape)


def test_unequal_batches_pool_to_the_global_mean_and_variance():
    rng = np.random.default_rng(0)
    batches = [rng.normal(i, 1 + i, size=(n, 3)) for i, n in enumerate([5, 1, 9])]
    n, mean, m2 = pool(batches)
    whole = np.concatenate(batches)
    assert n == len(whole)
    np.testing.assert_allclose(mean, whole.mean(0), rtol=1e-12)
    np.testing.assert_allclose(m2 / n, whole.var(0), rtol=1e-12)
    np.testing.assert_allclose(m2 / (n - 1), whole.var(0, ddof=1), rtol=1e-12)


def test_a_rank_with_an_empty_batch_adds_nothing():
    rng = np.random.default_rng(1)
    full = rng.normal(size=(4, 2))
    n, mean, m2 = pool([full, np.zeros((0, 2))])
    assert n == 4
    np.testing.assert_allclose(mean, full.mean(0), rtol=1e-12)
    np.testing.assert_allclose(m2 / n, full.var(0), rtol=1e-12)


def test_one_value_per_channel_in_all_is_refused():
    with pytest.raises(ValueError, match=r"input size \[1, 2\] on this rank and 1 values"):
        pool([np.ones((1, 2)), np.zeros((0, 2))])


def test_moments_of_summed_moments_are_the_global_batchs():
    from hvdlite.algorithms.batch_norm import moments_of_sums
    rng = np.random.default_rng(1)
    batches = [rng.normal(size=(n, 3)) for n in (2, 5, 1)]    # unequal batch sizes
    sums = sum(np.concatenate([len(b) * b.mean(0), len(b) * (b.var(0) + b.mean(0) ** 2),
                               [len(b)]]) for b in batches)
    mean, var = moments_of_sums(sums, 3)
    everything = np.concatenate(batches)
    np.testing.assert_allclose(mean, everything.mean(0), rtol=1e-12)
    np.testing.assert_allclose(var, everything.var(0), rtol=1e-12)
