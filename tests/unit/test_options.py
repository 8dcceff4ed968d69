"""hvdlite.policy.options: the one check of which DistributedOptimizer options combine
(torch and Keras raise the same words)."""

import pytest

from hvdlite.algorithms.compression import NoneCompressor, PowerSGD, TopK
from hvdlite.exceptions import HvdliteInvalidArgumentError
from hvdlite.policy import Average, Max, Sum
from hvdlite.policy.options import check_combination, is_compressed


class FP16:
    wire_dtype = "fp16"


def refused(words, **kw):
    kw.setdefault("op", Average)
    with pytest.raises(HvdliteInvalidArgumentError) as e:
        check_combination("DistributedOptimizer", **kw)
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_plain_options_pass():
    check_combination("opt", Average)
    check_combination("opt", Max, compression=FP16)
    check_combination("opt", Sum, shard_optimizer_state=True, bucket_bytes=1024)
    check_combination("opt", Average, local_steps=4, local_sgd_warmup_steps=2,
                      average_optimizer_state=True)
    check_combination("opt", Sum, compression=PowerSGD(rank=2))


def test_is_compressed():
    assert not is_compressed(None)
    assert not is_compressed(NoneCompressor)
    assert is_compressed(FP16)
    assert is_compressed(TopK(0.1))


def test_sharding_refuses_what_it_cannot_shard():
    refused(["shard_optimizer_state=True cannot be combined with local_steps"],
            shard_optimizer_state=True, local_steps=2)
    refused(["cannot be combined with compression"], shard_optimizer_state=True,
            compression=FP16)
    refused(["groups"], shard_optimizer_state=True, groups=2)
    refused(["op must be Average or Sum, not Max"], op=Max, shard_optimizer_state=True)


def test_bucket_bytes_goes_with_sharding():
    refused(["bucket_bytes applies to shard_optimizer_state=True"], bucket_bytes=10)


def test_local_sgd_rules():
    refused(["local_steps=2 cannot be combined with compression"], local_steps=2,
            compression=TopK(0.1))
    refused(["gradient_predivide_factor"], local_steps=2, predivide=2.0)
    refused(["local SGD averages parameters: op must be Average"], op=Sum, local_steps=2)
    refused(["go with local_steps=H"], local_sgd_warmup_steps=3)
    refused(["go with local_steps=H"], average_optimizer_state=True)


def test_stateful_compression_rules():
    refused(["cannot be combined with groups"], compression=PowerSGD(rank=1), groups=[[1]])
    refused(["op must be Average or Sum"], op=Max, compression=TopK(0.5))


def test_local_variables_combine_with_plain_options_only():
    from hvdlite.policy.options import check_local_variables
    check_local_variables("DistributedOptimizer(DistributedSGD)")
    for option in ("shard_optimizer_state", "local_sgd", "stateful_compression"):
        with pytest.raises(HvdliteInvalidArgumentError,
                           match=r"DistributedOptimizer\(DistributedSGD\): local variables "
                                 r"\(PartialDistributedOptimizer\) do not combine with "
                                 r"shard_optimizer_state, local_steps or stateful compression"):
            check_local_variables("DistributedOptimizer(DistributedSGD)", **{option: True})
