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

from hvdlite.policy import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from hvdlite.basics import (ccl_built, cross_rank, cross_size, cuda_built,  # noqa: F401
                            ddl_built, gloo_built, gloo_enabled, gpu_available, init,
                            is_homogeneous,
                            is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
                            mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size,
                            start_timeline, stop_timeline)
from hvdlite.exceptions import HvdliteError  # noqa: F401

from . import util  # noqa: F401
from .compression import (BF16Compressor, Compression, Compressor,  # noqa: F401
                          FP16Compressor, NoneCompressor)
from .distributed import (DistributedGradientTape,  # noqa: F401
                          PartialDistributedGradientTape)
from .errors import (HvdliteDeadlockError, HvdliteInternalError,  # noqa: F401
                     HvdliteInvalidArgumentError, HvdliteTimeoutError,
                     HvdliteMismatchError, HvdliteNotInitializedError, HvdliteOutOfMemoryError,
                     HvdliteRanksLostError, HvdliteShutdownError, HvdliteUnsupportedError)
from .functions import (allgather_object, broadcast_global_variables,  # noqa: F401
                        broadcast_object, broadcast_variables)
from .mpi_ops import (ProcessSet, add_process_set, allgather, allreduce,  # noqa: F401
                      alltoall, barrier, broadcast, broadcast_, global_process_set, grouped_allgather, grouped_allreduce,
                      grouped_reducescatter, join, local_rank_op, local_size_op,
                      process_set_included_op, rank_op, reducescatter, remove_process_set,
                      size_op)
from .sync_batch_norm import SyncBatchNormalization  # noqa: F401
from .util import _executing_eagerly  # noqa: F401
from . import elastic  # noqa: F401,E402
