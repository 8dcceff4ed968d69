"""hvdlite.algorithms.sharding: the ZeRO-1 plan (cuts, offsets, overlaps, buckets) and the
one optimizer accept-rule of torch and Keras."""

import numpy as np
import pytest

from hvdlite.algorithms.sharding import (ELEMENTWISE, buckets_by_bytes, check_shardable, cut,
                                         offsets, overlaps)
from hvdlite.exceptions import HvdliteInvalidArgumentError


@pytest.mark.parametrize("numel,size", [(10, 3), (9, 3), (1, 4), (0, 2), (1000, 7)])
def test_slices_tile_the_padded_bucket(numel, size):
    slices = [cut(numel, size, r) for r in range(size)]
    assert all(s.shard_numel == slices[0].shard_numel for s in slices)
    assert slices[0].padded >= numel and slices[0].padded - numel < size
    covered = np.concatenate([np.arange(s.begin, s.end) for s in slices])
    assert np.array_equal(covered, np.arange(slices[0].padded))


def test_overlaps_reassemble_every_piece():
    numels = [5, 1, 7, 3]
    starts = offsets(numels)
    assert starts == [0, 5, 6, 13]
    flat = np.arange(sum(numels))
    size = 3
    pieces = [np.zeros(n, int) - 1 for n in numels]
    for r in range(size):
        s = cut(sum(numels), size, r)
        shard = np.zeros(s.shard_numel, int)
        shard[:max(0, min(s.end, flat.size) - s.begin)] = flat[s.begin:s.end]
        for i, off, at, n in overlaps(starts, numels, s.begin, s.end):
            pieces[i][off:off + n] = shard[at:at + n]
    assert np.array_equal(np.concatenate(pieces), flat)


def test_buckets_close_before_overflowing():
    assert buckets_by_bytes([4, 4, 4, 4], 8) == [[0, 1], [2, 3]]
    assert buckets_by_bytes([10, 1, 1], 8) == [[0], [1, 2]]     # a big piece stands alone
    assert buckets_by_bytes([], 8) == []
    with pytest.raises(ValueError, match="bucket_bytes must be > 0"):
        buckets_by_bytes([1], 0)


def named(name, base=object):
    return type(name, (base,), {})


def test_one_accept_rule_for_every_framework():
    for name in ("SGD", "Adam", "AdamW", "RMSprop"):
        check_shardable(named(name)(), "opt")
    check_shardable(named("MyAdam", named("Adam"))(), "opt")       # subclasses pass
    for name in ("LBFGS", "Lamb", "Adafactor", "Muon", "SparseAdam", "Custom"):
        with pytest.raises(HvdliteInvalidArgumentError) as e:
            check_shardable(named(name)(), "opt")
        assert name in str(e.value) and "Supported: SGD" in str(e.value)
    with pytest.raises(HvdliteInvalidArgumentError):               # known whole-tensor wins
        check_shardable(named("Lamb", named("Adam"))(), "opt")
    assert "SGD" in ELEMENTWISE
