"""Which of the Keras ``DistributedOptimizer``'s options beyond Horovod combine: written once
here, so that every unsupported combination fails at construction with one clear error."""

from hvdlite.algorithms.compression import NoneCompressor, is_stateful
from hvdlite.exceptions import HvdliteInvalidArgumentError
from hvdlite.ops import Average, Sum


def check_combination(what, compression, shard_optimizer_state, local_steps,
                      local_sgd_warmup_steps, average_optimizer_state, predivide, op):
    compressed = compression is not None and compression is not NoneCompressor \
        and not getattr(compression, "is_identity", False)
    if shard_optimizer_state:
        bad = [k for k, v in (("local_steps", local_steps is not None),
                              (f"compression={compression!r}", compressed)) if v]
        if bad:
            raise HvdliteInvalidArgumentError(
                f"{what}: shard_optimizer_state=True cannot be combined with "
                f"{', '.join(bad)} (the reduce-scatter of the shards sends full precision)")
        if op not in (Average, Sum):
            raise HvdliteInvalidArgumentError(
                f"{what}: shard_optimizer_state=True supports op=Average or op=Sum")
    if local_steps is not None:
        if compressed:
            raise HvdliteInvalidArgumentError(
                f"{what}: local_steps cannot be combined with compression={compression!r} "
                f"(local SGD averages the variables uncompressed)")
        if op is not Average or predivide != 1.0:
            raise HvdliteInvalidArgumentError(
                f"{what}: local SGD averages variables: it needs op=Average and "
                f"gradient_predivide_factor=1.0")
    elif local_sgd_warmup_steps or average_optimizer_state:
        raise HvdliteInvalidArgumentError(
            f"{what}: local_sgd_warmup_steps and average_optimizer_state go with local_steps=H")
    if is_stateful(compression) and op not in (Average, Sum):
        raise HvdliteInvalidArgumentError(
            f"{what}: compression={compression!r} supports op=Average or op=Sum")
