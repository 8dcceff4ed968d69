"""hvdlite for Keras 3 on TensorFlow: ``import hvdlite.tensorflow.keras as hvd``.

Horovod's ``horovod.tensorflow.keras``: hvdlite.tensorflow's API plus the Keras pieces,
which are written once, for every Keras backend, in :mod:`hvdlite.keras` (the
backend-neutral entry point; with ``KERAS_BACKEND=tensorflow`` the two modules offer the
same objects). The example of :mod:`hvdlite.keras` runs as it is with
``import hvdlite.tensorflow.keras as hvd``.
"""

import keras
import tensorflow as tf

if keras.backend.backend() != "tensorflow":
    raise ImportError(
        f"hvdlite.tensorflow.keras needs Keras' TensorFlow backend, but Keras runs on "
        f"'{keras.backend.backend()}' (KERAS_BACKEND); use `import hvdlite.keras as hvd`, "
        f"which serves every backend")

import hvdlite.tensorflow as _hvd_tf  # noqa: E402
# Horovod's hvd.keras re-exports the basics.
from hvdlite.tensorflow import *  # noqa: F401,F403,E402
from hvdlite.tensorflow import (Average, Compression, Sum, init, rank, shutdown,  # noqa: F401,E402
                                size, local_rank, local_size, cross_rank, cross_size,
                                is_initialized, mpi_built, nccl_built, allgather_object,
                                broadcast_object, broadcast_variables, start_timeline,
                                stop_timeline)
from hvdlite.keras import (DistributedOptimizer, PartialDistributedOptimizer,  # noqa: F401,E402
                           allgather, allreduce, broadcast, load_model)

from . import callbacks  # noqa: F401,E402
# Not `from . import elastic`: the star import above already bound hvdlite.tensorflow.elastic.
elastic = __import__("importlib").import_module(".elastic", __name__)


def reducescatter(value, name=None, op=Average):
    """Reduce-scatter a value along its first dimension; returns a tensor."""
    return _hvd_tf.reducescatter(tf.constant(value) if not tf.is_tensor(value) else value,
                                 op=op, name=name)
