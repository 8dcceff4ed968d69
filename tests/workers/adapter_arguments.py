"""The torch and TensorFlow adapters apply the core's one integer-argument rule: root_rank,
splits and op take integers only (numpy and integer tensors included) and raise
HvdliteInvalidArgumentError otherwise, never truncating 1.5 to 1. Needs 2 ranks."""
import re

import numpy as np

from hvdlite import HvdliteInvalidArgumentError


def expect(pattern, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except HvdliteInvalidArgumentError as e:
        assert re.search(pattern, str(e)), f"{str(e)!r} does not match {pattern!r}"
        return
    raise AssertionError(f"{fn} did not raise HvdliteInvalidArgumentError")


def check(hvd, tensor, tag):
    N = hvd.size()
    for bad in (1.5, "0", 2**31, 2**63):
        expect("root_rank|root rank", hvd.broadcast, tensor([1.0, 2.0]), bad)
    for bad in (1.0, "1", 1.5):
        expect("op must be an integer", hvd.allreduce, tensor([1.0]), op=bad)
    expect("split must be an integer|splits must be integers", hvd.alltoall,
           tensor([1.0] * N), splits=[1.5] + [1] * (N - 1))
    got = hvd.broadcast(tensor([float(hvd.rank())]), np.int64(1), name=f"{tag}.np.root")
    assert float(np.asarray(got)[0]) == 1.0, got
    got = hvd.allreduce(tensor([1.0]), op=hvd.Sum, name=f"{tag}.ok")
    assert float(np.asarray(got)[0]) == N, got


import torch  # noqa: E402
import hvdlite.torch as thvd  # noqa: E402

thvd.init()
check(thvd, lambda v: torch.tensor(v), "torch")

import tensorflow as tf  # noqa: E402
import hvdlite.tensorflow as tfhvd  # noqa: E402

check(tfhvd, lambda v: tf.constant(v), "tf")
expect("splits must be integers", tfhvd.alltoall, tf.constant([1.0, 2.0]),
       splits=tf.constant([1.0, 1.0]))
print(f"rank {thvd.rank()}: ALL OK", flush=True)
