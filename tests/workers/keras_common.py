"""Shared setup for the backend-neutral Keras workers: one thread per rank on whichever
backend KERAS_BACKEND names (set before keras is imported), and small check helpers."""
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                      "intra_op_parallelism_threads=1")
BACKEND = os.environ.get("KERAS_BACKEND", "tensorflow")

if BACKEND == "tensorflow":
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.get_logger().setLevel("ERROR")
elif BACKEND == "torch":
    import torch
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)

import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

_checks = []


def check(cond, what):
    """Record a check; fail loudly (the excepthook then aborts the whole job)."""
    _checks.append(what)
    if not cond:
        raise AssertionError(f"[{BACKEND} rank {os.environ.get('OMPI_COMM_WORLD_RANK', '?')}] "
                             f"{what}")


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


def digits():
    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int32)


def done(name, rank):
    print(f"{name}: {BACKEND} rank {rank} OK ({len(_checks)} checks)", flush=True)
    sys.stdout.flush()
