"""hvdlite: Horovod-style synchronous data-parallel training over MPI.

``import hvdlite as hvd`` gives the framework-free API on numpy arrays (and any array with
``__dlpack__``); ``hvdlite.torch`` and ``hvdlite.tensorflow`` wrap the same core for their
tensors. Names and signatures follow Horovod.
"""

from .exceptions import (HvdliteDeadlockError, HvdliteError, HvdliteInternalError,
                         HvdliteInvalidArgumentError, HvdliteLaunchError, HvdliteMismatchError,
                         HvdliteNotInitializedError, HvdliteOutOfMemoryError, HvdliteRanksLostError,
                         HvdliteShutdownError, HvdliteTimeoutError, HvdliteUnsupportedError)
from .policy import Adasum, Average, Max, Min, Product, Sum
from .work import Work
from .process_sets import ProcessSet, add_process_set, global_process_set, remove_process_set
from .basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,
                     gloo_enabled, gpu_available, init, is_homogeneous, is_initialized,
                     local_rank, local_size,
                     mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank,
                     rocm_built, shutdown, size, start_timeline, stop_timeline)
from .numpy_api import (allgather, allgather_async, allgather_object, allreduce, allreduce_,
                        allreduce_async, allreduce_async_, alltoall, alltoall_async, barrier,
                        broadcast, broadcast_, broadcast_async, broadcast_async_,
                        broadcast_object, grouped_allgather, grouped_allgather_async,
                        grouped_allreduce, grouped_allreduce_, grouped_allreduce_async,
                        grouped_allreduce_async_, grouped_reducescatter,
                        grouped_reducescatter_async, join, poll, reducescatter,
                        reducescatter_async, synchronize)

__version__ = "0.1.0"
