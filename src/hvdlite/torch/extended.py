"""The options of ``DistributedOptimizer`` that go beyond Horovod, each in its own module:

- ``shard_optimizer_state=True``: ZeRO stage 1 (:mod:`hvdlite.torch.zero`);
- ``local_steps=H``: local SGD, parameters averaged every H steps (:mod:`.local_sgd`);
- ``compression=Compression.powersgd(...)`` / ``.topk(...)`` / ``.fp16(error_feedback=True)``:
  compression that keeps state between steps (:mod:`.stateful_compression`).

``DistributedOptimizer`` calls :func:`wants_extension` and, when it says yes, hands the whole
call to :func:`make`; the plain all-reduce path never sees these options. Which options
combine is :func:`hvdlite.policy.options.check_combination`'s, shared with Keras.
"""

from hvdlite import basics, policy
from hvdlite.algorithms.compression import is_stateful
from hvdlite.exceptions import HvdliteInvalidArgumentError
from hvdlite.policy.options import check_combination

from ._wrap import parameter_names
from .local_sgd import make_local_sgd
from .stateful_compression import make_compressed
from .zero import DEFAULT_BUCKET_BYTES, make_sharded


def wants_extension(compression, shard_optimizer_state, local_steps):
    return bool(shard_optimizer_state) or local_steps is not None or is_stateful(compression)


def make(optimizer, named_parameters, compression, backward_passes_per_step, op,
         gradient_predivide_factor, groups, sparse_as_dense, shard_optimizer_state,
         local_steps, process_set=None, bucket_bytes=None, local_sgd_warmup_steps=0,
         average_optimizer_state=False):
    """The option's DistributedOptimizer; each reduces over ``process_set`` (None: all)."""
    if process_set is not None and not process_set.included():
        raise HvdliteInvalidArgumentError(
            f"DistributedOptimizer: this rank ({basics.rank()}) is not a member of "
            f"{process_set}; only its members can build an optimizer that reduces over it")
    check_combination("DistributedOptimizer", op, compression, shard_optimizer_state,
                      local_steps, local_sgd_warmup_steps, average_optimizer_state,
                      float(gradient_predivide_factor), groups, bucket_bytes)
    names = parameter_names(optimizer, named_parameters, "allreduce")
    op, pre, post = policy.reduction(op, float(gradient_predivide_factor), process_set)
    if shard_optimizer_state:
        return make_sharded(optimizer, names, backward_passes_per_step, op, pre, post,
                            DEFAULT_BUCKET_BYTES if bucket_bytes is None else bucket_bytes,
                            process_set)
    if local_steps is not None:
        return make_local_sgd(optimizer, names, local_steps, local_sgd_warmup_steps,
                              average_optimizer_state, process_set)
    return make_compressed(optimizer, names, compression, op, pre, post, process_set)
