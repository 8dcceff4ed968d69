"""hvdlite for Keras 3, whichever backend Keras runs on: ``import hvdlite.keras as hvd``.

Works with ``KERAS_BACKEND=tensorflow``, ``torch`` and ``jax`` (read from Keras at import;
``hvd.init()`` names any other backend and fails). The same script runs on each::

    import keras
    import hvdlite.keras as hvd

    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    model.fit(x_shard, y_shard, epochs=5,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                         hvd.callbacks.MetricAverageCallback()],
              verbose=1 if hvd.rank() == 0 else 0)

How gradients reach the core on each backend (see src/hvdlite/keras/bridges/):
- TensorFlow: hvdlite.tensorflow's collectives (one ``tf.numpy_function`` per step);
- torch: hvdlite.torch's collectives on the gradient tensors (Keras' torch trainer is eager);
- JAX: the jitted train step calls the core through ``jax.experimental.io_callback``.
"""

import hvdlite as _hvd
from hvdlite import (cross_rank, cross_size, is_initialized, local_rank,  # noqa: F401
                     local_size, mpi_built, nccl_built, rank, shutdown, size)
from hvdlite.exceptions import (HvdliteError, HvdliteInternalError,  # noqa: F401
                                HvdliteInvalidArgumentError, HvdliteMismatchError,
                                HvdliteNotInitializedError, HvdliteShutdownError)
from hvdlite.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from hvdlite.process_sets import (ProcessSet, add_process_set,  # noqa: F401
                                  global_process_set, remove_process_set)

from . import callbacks  # noqa: F401
from .backend import BACKEND, SUPPORTED_BACKENDS, bridge, check_supported  # noqa: F401
from .functions import allgather, allreduce, broadcast, broadcast_variables  # noqa: F401
from .optimizer import (DistributedOptimizer, PartialDistributedOptimizer,  # noqa: F401
                        load_model)


def init(*args, **kwargs):
    """Start hvdlite (as ``hvdlite.init``) after checking that it can serve Keras' backend."""
    check_supported()
    bridge()
    return _hvd.init(*args, **kwargs)


def __getattr__(name):
    # The backend's Compression namespace, imported with the backend only when asked for.
    if name == "Compression":
        return bridge().Compression
    raise AttributeError(f"module 'hvdlite.keras' has no attribute '{name}'")
