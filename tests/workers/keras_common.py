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

import worker_checks  # noqa: E402
from worker_checks import check, done, expect_error, rel_err  # noqa: E402,F401

worker_checks.label = BACKEND


def digits():
    d = load_digits()
    return (d.data / 16.0).astype(np.float32), d.target.astype(np.int32)
