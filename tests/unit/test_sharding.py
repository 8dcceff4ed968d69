"""hvdlite.algorithms.sharding: the ZeRO-1 plan (cuts, offsets, overlaps, buckets) and the
one optimizer accept-rule of torch and Keras."""

import numpy as np
import pytest

from hvdlite.algorithms.sharding import (ELEMENTWISE, BucketPlan, buckets_by_bytes,
                                         check_owner, check_reshardable, check_shardable, cut,
                                         instance_prefix, offsets, overlaps, place,
                                         plan_buckets)
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


def test_buckets_hold_one_dtype_in_packing_order():
    dtypes = ["float64", "float32", "float64", "float32", "float64"]
    assert plan_buckets(dtypes, None) == [[1, 3], [0, 2, 4]]     # float32 before float64
    assert plan_buckets(dtypes, [8, 4, 8, 4, 8], 16) == [[1, 3], [0, 2], [4]]


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


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_bucket_plan_shards_reassemble_the_pieces(size):
    numels = [4, 1, 6, 2]
    pieces = [np.arange(n, dtype=float) + 10 * i for i, n in enumerate(numels)]
    shards = []
    for r in range(size):
        plan = BucketPlan([(n,) for n in numels], size, r)
        shard = plan.fill_shard(np.full(plan.shard_numel, -1.0), pieces)
        shards.append(shard)
    plan = BucketPlan([(n,) for n in numels], size, 0)
    whole = np.concatenate(shards)
    assert whole.size == plan.padded
    assert all(np.array_equal(a, b) for a, b in zip(plan.split(whole), pieces))
    shaped = BucketPlan([(2, 2), (), (3, 2), (2, 1)], size, 0).shaped(whole)
    assert [p.shape for p in shaped] == [(2, 2), (), (3, 2), (2, 1)]
    assert all(np.array_equal(a.reshape(-1), b) for a, b in zip(shaped, pieces))
    assert np.all(whole[plan.numel:] == -1.0)     # the padding is left alone


def test_place_is_the_process_set_or_all_ranks():
    class Set:
        def rank(self):
            return 1

        def size(self):
            return 3
    assert place(Set()) == (1, 3)


def test_only_global_shards_reshard():
    check_reshardable(None, "opt")
    with pytest.raises(HvdliteInvalidArgumentError, match="opt: .*process set 4 cannot be "
                       "resharded"):
        check_reshardable(type("Set", (), {"process_set_id": 4})(), "opt")


def test_owner_mismatch_names_both_places():
    check_owner((0, 2, [5]), [0, 2, [5]], "load", "Save it whole.")
    with pytest.raises(HvdliteInvalidArgumentError) as e:
        check_owner((1, 2, [5]), (0, 3, [5]), "load", "Save it whole.")
    assert str(e.value) == ("load: this sharded optimizer state was saved by rank 1 of 2 "
                            "(buckets of [5] elements); this is rank 0 of 3 (buckets of [5] "
                            "elements). Save it whole.")
    with pytest.raises(HvdliteInvalidArgumentError, match="rank 1 of 2; this is rank 0 of 2"):
        check_owner((1, 2), (0, 2), "load", "")


def test_options_over_whole_variables_are_refused():
    sgd = named("SGD")
    for option, value, words in [("clipnorm", 1.0, "cannot apply clipnorm"),
                                 ("global_clipnorm", 1.0, "cannot apply global_clipnorm"),
                                 ("_exclude_from_weight_decay", ["b"], "exclude_from_weight"),
                                 ("gradient_accumulation_steps", 2, "gradient_accumulation"),
                                 ("use_ema", True, "use_ema")]:
        opt = sgd()
        setattr(opt, option, value)
        with pytest.raises(HvdliteInvalidArgumentError, match=f"^opt: .*{words}"):
            check_shardable(opt, "opt")
    opt = sgd()
    opt.clipnorm, opt.use_ema = None, False        # Keras' defaults pass
    check_shardable(opt, "opt")


def test_sharded_optimizers_are_numbered_per_process_set():
    class Set:
        process_set_id = 7123

    first, second = instance_prefix(Set()), instance_prefix(Set())
    assert (first, second) == ("zero7123.0", "zero7123.1")
    assert instance_prefix(None).startswith("zero0.")
