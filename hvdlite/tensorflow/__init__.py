"""hvdlite for TensorFlow 2: ``import hvdlite.tensorflow as hvd``.

Horovod's TensorFlow API on the hvdlite core: collectives on ``tf.Tensor`` that work
eagerly and inside ``tf.function`` and carry Horovod's gradients, variable/object
broadcast helpers and ``DistributedGradientTape``. The Keras 3 pieces
(``DistributedOptimizer`` and the callbacks) are in ``hvdlite.tensorflow.keras``
(alias ``hvdlite.keras``).

Typical custom training loop::

    import tensorflow as tf
    import hvdlite.tensorflow as hvd

    hvd.init()

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    hvd.broadcast_variables(model.variables, root_rank=0)
"""

import hvdlite as _hvd
from hvdlite.exceptions import (HvdliteError, HvdliteInternalError,  # noqa: F401
                                HvdliteInvalidArgumentError, HvdliteMismatchError,
                                HvdliteNotInitializedError, HvdliteShutdownError)
from hvdlite.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401

from .compression import (BF16Compressor, Compression, Compressor,  # noqa: F401
                          FP16Compressor, NoneCompressor)
from .distributed import DistributedGradientTape  # noqa: F401
from .functions import allgather_object, broadcast_object, broadcast_variables  # noqa: F401
from . import elastic  # noqa: F401,E402
from .mpi_ops import (SUPPORTED_DTYPES, allgather, allreduce, alltoall,  # noqa: F401
                      barrier, broadcast, grouped_allreduce, join, reducescatter)

# Basics, re-exported from the framework-free package.
init = _hvd.init
shutdown = _hvd.shutdown
is_initialized = _hvd.is_initialized
rank = _hvd.rank
size = _hvd.size
local_rank = _hvd.local_rank
local_size = _hvd.local_size
cross_rank = _hvd.cross_rank
cross_size = _hvd.cross_size
mpi_built = _hvd.mpi_built
nccl_built = _hvd.nccl_built
start_timeline = _hvd.start_timeline
stop_timeline = _hvd.stop_timeline


def _optional(name, default):
    return getattr(_hvd, name, default)


mpi_enabled = _optional("mpi_enabled", mpi_built)
mpi_threads_supported = _optional("mpi_threads_supported", lambda: True)
gloo_built = _optional("gloo_built", lambda: False)
gloo_enabled = _optional("gloo_enabled", lambda: False)
cuda_built = _optional("cuda_built", lambda: False)
rocm_built = _optional("rocm_built", lambda: False)
ccl_built = _optional("ccl_built", lambda: False)
ddl_built = _optional("ddl_built", lambda: False)


def is_homogeneous():
    """True when every host runs the same number of ranks (Horovod API)."""
    fn = getattr(_hvd, "is_homogeneous", None)
    if fn is not None:
        return fn()
    return size() % local_size() == 0 if local_size() else True


def _executing_eagerly():
    import tensorflow as tf
    return tf.executing_eagerly()
