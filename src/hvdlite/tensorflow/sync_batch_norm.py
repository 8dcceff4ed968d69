"""``SyncBatchNormalization``: Keras batch normalization whose training statistics cover
the batch of every rank (of a process set), as Horovod's ``hvd.SyncBatchNormalization``."""

import keras
import tensorflow as tf

from hvdlite.algorithms.batch_norm import moments_of_sums
from hvdlite.policy import Sum

from .mpi_ops import allreduce, global_process_set


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """``keras.layers.BatchNormalization`` with the mean and variance of the global batch.

    Each rank's (count, sum, sum of squares) per channel go to the core in one all-reduce,
    so ranks may hold different batch sizes. ``fused`` is accepted for Horovod (Keras 3
    has no fused kernel). Every rank must call the layer in the same order.
    """

    def __init__(self, fused=None, process_set=global_process_set, **kwargs):
        if fused:
            raise ValueError("SyncBatchNormalization does not support fused=True")
        super().__init__(**kwargs)
        self._hvd_process_set = process_set

    def _moments(self, inputs, mask):
        mean, variance = super()._moments(inputs, mask)
        if mask is None:
            count = tf.size(inputs) // tf.size(mean)
        else:
            count = tf.reduce_sum(tf.cast(mask, tf.int64))
        n = tf.cast(count, tf.float64)
        mean64, var64 = tf.cast(mean, tf.float64), tf.cast(variance, tf.float64)
        local = tf.concat([mean64 * n, (var64 + tf.square(mean64)) * n, tf.reshape(n, [1])], 0)
        total = allreduce(local, op=Sum, process_set=self._hvd_process_set)
        global_mean, global_var = moments_of_sums(total, tf.size(mean))
        return (tf.reshape(tf.cast(global_mean, mean.dtype), tf.shape(mean)),
                tf.reshape(tf.cast(global_var, variance.dtype), tf.shape(variance)))

    def get_config(self):
        return super().get_config()
