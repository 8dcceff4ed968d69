"""Alias of :mod:`hvdlite.tensorflow.keras` (Keras 3 with the TensorFlow backend):
``import hvdlite.keras as hvd``."""

from hvdlite.tensorflow.keras import *  # noqa: F401,F403
from hvdlite.tensorflow.keras import (DistributedOptimizer, allgather, allreduce,  # noqa: F401
                                      broadcast, callbacks, load_model, reducescatter)
