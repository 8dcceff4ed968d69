"""Shared setup for the TensorFlow workers: quiet, thread-limited TF and small helpers."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(2)
tf.get_logger().setLevel("ERROR")          # retracing notices from the many small test functions
tf.autograph.set_verbosity(0)

from worker_checks import check, done, expect_error, rel_err  # noqa: E402,F401
