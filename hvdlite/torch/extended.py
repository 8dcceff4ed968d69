"""The options of ``DistributedOptimizer`` that go beyond Horovod, each in its own module:

- ``shard_optimizer_state=True``: ZeRO stage 1 (:mod:`hvdlite.torch.zero`);
- ``local_steps=H``: local SGD, parameters averaged every H steps (:mod:`.local_sgd`);
- ``compression=Compression.powersgd(...)`` / ``.topk(...)`` / ``.fp16(error_feedback=True)``:
  compression that keeps state between steps (:mod:`.stateful_compression`).

``DistributedOptimizer`` calls :func:`wants_extension` and, when it says yes, hands the whole
call to :func:`make`; the plain all-reduce path never sees these options.
"""

from hvdlite.algorithms.compression import NoneCompressor, is_stateful
from hvdlite.exceptions import HvdliteInvalidArgumentError

from ._wrap import SynchronizeProtocol, parameter_names
from .mpi_ops import Average, Sum


def is_wrapped(optimizer):
    """Whether ``optimizer`` already is one of these options' DistributedOptimizers."""
    return isinstance(optimizer, SynchronizeProtocol)


def wants_extension(compression, shard_optimizer_state, local_steps):
    return bool(shard_optimizer_state) or local_steps is not None or is_stateful(compression)


def _reject(what, **given):
    bad = [k for k, v in given.items() if v]
    if bad:
        raise HvdliteInvalidArgumentError(f"DistributedOptimizer({what}) cannot be combined "
                                          f"with {', '.join(bad)}")


def make(optimizer, named_parameters, compression, backward_passes_per_step, op,
         gradient_predivide_factor, groups, sparse_as_dense, shard_optimizer_state,
         local_steps, process_set=None, bucket_bytes=None, local_sgd_warmup_steps=0,
         average_optimizer_state=False):
    """The option's DistributedOptimizer; each reduces over ``process_set`` (None: all)."""
    if process_set is not None and not process_set.included():
        raise HvdliteInvalidArgumentError(
            f"DistributedOptimizer: this rank ({_rank()}) is not a member of {process_set}; "
            f"only its members can build an optimizer that reduces over it")
    stateful = is_stateful(compression)
    plain_compression = compression not in (None, NoneCompressor) and not stateful
    names = parameter_names(optimizer, named_parameters, "allreduce")
    if op == Average and gradient_predivide_factor != 1.0:
        f = float(gradient_predivide_factor)
        op, pre, post = Sum, 1.0 / f, f / _size(process_set)
    else:
        pre, post = 1.0, 1.0
    if shard_optimizer_state:
        _reject("shard_optimizer_state=True", groups=groups, local_steps=local_steps,
                compression=stateful or plain_compression,
                local_sgd_warmup_steps=local_sgd_warmup_steps,
                average_optimizer_state=average_optimizer_state)
        from .zero import DEFAULT_BUCKET_BYTES, make_sharded
        return make_sharded(optimizer, names, backward_passes_per_step, op, pre, post,
                            DEFAULT_BUCKET_BYTES if bucket_bytes is None else bucket_bytes,
                            process_set)
    if bucket_bytes is not None:
        raise HvdliteInvalidArgumentError("bucket_bytes applies to shard_optimizer_state=True")
    if local_steps is not None:
        _reject(f"local_steps={local_steps}", groups=groups, compression=stateful or
                plain_compression, gradient_predivide_factor=gradient_predivide_factor != 1.0)
        if op != Average:
            raise HvdliteInvalidArgumentError("local SGD averages parameters: op must be Average")
        from .local_sgd import make_local_sgd
        return make_local_sgd(optimizer, names, local_steps, local_sgd_warmup_steps,
                              average_optimizer_state, process_set)
    _reject("compression=" + type(compression).__name__, groups=groups,
            local_sgd_warmup_steps=local_sgd_warmup_steps,
            average_optimizer_state=average_optimizer_state)
    if op not in (Average, Sum):
        raise HvdliteInvalidArgumentError(f"{type(compression).__name__}: op must be Average "
                                          f"or Sum")
    from .stateful_compression import make_compressed
    return make_compressed(optimizer, names, compression, op, pre, post, process_set)


def _size(process_set=None):
    import hvdlite
    return hvdlite.size() if process_set is None else process_set.size()


def _rank():
    import hvdlite
    return hvdlite.rank()
