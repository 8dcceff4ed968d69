"""PyTorch adapter: ``import hvdlite.torch as hvd`` in place of ``import horovod.torch as hvd``.

::

    import hvdlite.torch as hvd

    hvd.init()
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    for x, y in shard_of_the_data:            # each rank trains on its own shard
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()       # gradients are all-reduced during backward
        optimizer.step()                      # waits for them, then updates

Collectives take CPU tensors without copying (CUDA tensors are staged through host memory:
hvdlite is built without NCCL). See :mod:`hvdlite.torch.mpi_ops` for the rules on dtypes and
contiguity.
"""

from hvdlite.basics import (ccl_built, cross_rank, cross_size, cuda_built,  # noqa: F401
                            ddl_built, gloo_built, gloo_enabled, gpu_available, init,
                            is_homogeneous,
                            is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
                            mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size,
                            start_timeline, stop_timeline)
from hvdlite.exceptions import (HorovodInternalError, HvdliteDeadlockError,  # noqa: F401
                                HvdliteError, HvdliteInternalError, HvdliteTimeoutError,
                                HvdliteInvalidArgumentError, HvdliteLaunchError,
                                HvdliteMismatchError, HvdliteNotInitializedError,
                                HvdliteOutOfMemoryError, HvdliteShutdownError)

from .compression import Compression, Compressor
from .functions import (allgather_object, broadcast_object, broadcast_optimizer_state,
                        broadcast_parameters)
from .mpi_ops import (Adasum, Average, Max, Min, Product, ProcessSet, Sum, allgather,
                      allgather_async, allreduce, allreduce_, allreduce_async, allreduce_async_,
                      alltoall, alltoall_async, barrier, broadcast, broadcast_, broadcast_async,
                      broadcast_async_, add_process_set, global_process_set, grouped_allgather,
                      grouped_allgather_async, grouped_allreduce, grouped_allreduce_,
                      grouped_allreduce_async, grouped_allreduce_async_, grouped_reducescatter,
                      grouped_reducescatter_async, join, poll, reducescatter,
                      reducescatter_async, remove_process_set, sparse_allreduce_async,
                      synchronize)
from .optimizer import DistributedOptimizer, GradientAccumulationError
from .sync_batch_norm import SyncBatchNorm
from . import elastic

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "mpi_built", "nccl_built", "mpi_enabled",
    "mpi_threads_supported", "gloo_built", "gloo_enabled", "cuda_built", "rocm_built",
    "ccl_built", "ddl_built", "gpu_available", "is_homogeneous", "start_timeline", "stop_timeline",
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "HvdliteError", "HvdliteInternalError", "HvdliteInvalidArgumentError",
    "HvdliteMismatchError", "HvdliteNotInitializedError", "HvdliteOutOfMemoryError",
    "HvdliteShutdownError", "HvdliteDeadlockError", "HvdliteTimeoutError", "HvdliteLaunchError",
    "HorovodInternalError", "GradientAccumulationError",
    "Compression", "Compressor",
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "sparse_allreduce_async", "allgather", "allgather_async",
    "grouped_allgather", "grouped_allgather_async", "broadcast", "broadcast_",
    "broadcast_async", "broadcast_async_", "alltoall", "alltoall_async", "reducescatter",
    "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "barrier", "join", "poll", "synchronize",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "DistributedOptimizer", "SyncBatchNorm",
    "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object", "allgather_object",
]

# torch.distributed backend "hvdlite" (dist.init_process_group("hvdlite", init_method="hvdlite://"))
from . import distributed  # noqa: E402,F401  registers it
