"""Synchronous batch normalization's statistics over every rank's batch, exact for unequal
batch sizes: torch's ``SyncBatchNorm`` pools each rank's per-channel (count, mean, centred sum
of squares) with the parallel-variance formula (Chan, Golub and LeVeque); TensorFlow's
``SyncBatchNormalization`` sums each rank's (count * mean, count * mean of squares, count).
Written on array arithmetic alone, so numpy arrays and torch and TensorFlow tensors all go
through it."""


def pooled_moments(counts, means, m2s, input_shape):
    """(count, mean, M2) per channel of the union of the ranks' batches.

    ``counts``: (ranks,) values per channel on each rank; ``means``, ``m2s``: (ranks,
    channels) each rank's mean and sum of squared deviations from it. The variance is
    ``M2 / count`` (``M2 / (count - 1)`` unbiased). Raises ValueError, as torch's BatchNorm,
    when all ranks together hold at most one value per channel (``input_shape``: this
    rank's input, for the message).
    """
    n_total = counts.sum()
    if float(n_total) <= 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got "
                         f"input size {list(input_shape)} on this rank and {int(n_total)} "
                         f"values per channel in all")
    mean = (counts[:, None] * means).sum(0) / n_total
    m2 = (m2s + counts[:, None] * (means - mean) ** 2).sum(0)
    return n_total, mean, m2


def moments_of_sums(sums, channels):
    """(mean, variance) per channel from ``sums``, the sum over ranks of each rank's
    ``[count * mean (channels values), count * (variance + mean ** 2) (channels values),
    count]``: the biased variance of the union of the batches, ``E[x²] - E[x]²``."""
    count = sums[-1]
    mean = sums[:channels] / count
    return mean, sums[channels:2 * channels] / count - mean * mean
