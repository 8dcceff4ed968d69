"""Horovod's ``horovod.tensorflow.util`` helpers that scripts and tests import."""

import tensorflow as tf


def _executing_eagerly():
    """True outside graphs (Horovod's name; scripts call ``hvd._executing_eagerly()``)."""
    return tf.executing_eagerly()
