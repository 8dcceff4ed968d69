"""Which options of ``DistributedOptimizer`` beyond Horovod combine, written once for the torch
and Keras optimizers: every unsupported combination fails at construction, with the same
words in both frameworks.

- ``shard_optimizer_state=True`` (ZeRO-1) reduce-scatters full-precision gradients of flat
  shards: no compression, no local SGD, no groups; op Average or Sum.
- ``local_steps=H`` averages parameters, uncompressed: op Average, no predivide, no groups.
- stateful compression (PowerSGD, top-k, error-feedback casts) reduces all gradients in one
  reducer: no groups; op Average or Sum.
- local variables (``register_local_var``, ``PartialDistributedOptimizer``) leave gradients
  out of the reduction: none of the three above.
"""

from hvdlite.exceptions import HvdliteInvalidArgumentError

from .reduce_ops import Average, require_average_or_sum


def is_compressed(compression):
    """Whether ``compression`` changes what is sent (anything but none / identity)."""
    return compression is not None and not getattr(compression, "is_identity", False)


def _reject(what, option, **given):
    bad = [k for k, v in given.items() if v]
    if bad:
        raise HvdliteInvalidArgumentError(f"{what}: {option} cannot be combined with "
                                          f"{', '.join(bad)}")


def check_combination(what, op, compression=None, shard_optimizer_state=False,
                      local_steps=None, local_sgd_warmup_steps=0,
                      average_optimizer_state=False, predivide=1.0, groups=None,
                      bucket_bytes=None):
    """Raise HvdliteInvalidArgumentError (naming ``what`` and the options) unless the options
    combine. ``op`` is resolved already (:func:`.reduce_ops.resolve_op`)."""
    compressed = is_compressed(compression)
    if shard_optimizer_state:
        _reject(what, "shard_optimizer_state=True", groups=groups,
                local_steps=local_steps is not None, compression=compressed,
                local_sgd_warmup_steps=local_sgd_warmup_steps,
                average_optimizer_state=average_optimizer_state)
        require_average_or_sum(op, f"{what}: shard_optimizer_state=True",
                               "the shards' gradients are reduce-scattered")
    elif bucket_bytes is not None:
        raise HvdliteInvalidArgumentError(
            f"{what}: bucket_bytes applies to shard_optimizer_state=True")
    if local_steps is not None:
        _reject(what, f"local_steps={local_steps}", groups=groups, compression=compressed,
                gradient_predivide_factor=predivide != 1.0)
        if op != Average:
            raise HvdliteInvalidArgumentError(
                f"{what}: local SGD averages parameters: op must be Average")
    elif local_sgd_warmup_steps or average_optimizer_state:
        raise HvdliteInvalidArgumentError(
            f"{what}: local_sgd_warmup_steps and average_optimizer_state go with "
            f"local_steps=H")
    if getattr(compression, "keeps_state", False):   # hvdlite.algorithms.compression
        _reject(what, f"compression={compression!r}", groups=groups)
        require_average_or_sum(op, f"{what}: compression={compression!r}")


def check_local_variables(what, shard_optimizer_state=False, local_sgd=False,
                          stateful_compression=False):
    """Raise HvdliteInvalidArgumentError unless an optimizer with these options (each a bool)
    may keep some variables' gradients local."""
    if shard_optimizer_state or local_sgd or stateful_compression:
        raise HvdliteInvalidArgumentError(
            f"{what}: local variables (PartialDistributedOptimizer) do not combine with "
            f"shard_optimizer_state, local_steps or stateful compression")
