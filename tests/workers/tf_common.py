"""Shared setup for the TensorFlow workers: quiet, thread-limited TF and small helpers."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(2)
tf.get_logger().setLevel("ERROR")          # retracing notices from the many small test functions
tf.autograph.set_verbosity(0)

_checks = []


def check(cond, what):
    """Record a check; fail loudly (the excepthook then aborts the whole job)."""
    _checks.append(what)
    if not cond:
        raise AssertionError(f"[rank {os.environ.get('OMPI_COMM_WORLD_RANK', '?')}] {what}")


def expect_error(exc_types, fn, must_contain=(), what=""):
    try:
        fn()
    except exc_types as e:
        msg = str(e)
        for s in must_contain:
            check(s in msg, f"{what}: error message {msg!r} should mention {s!r}")
        return msg
    raise AssertionError(f"{what}: expected {exc_types} but nothing was raised")


def rel_err(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def done(name, rank):
    print(f"{name}: rank {rank} OK ({len(_checks)} checks)", flush=True)
    sys.stdout.flush()
