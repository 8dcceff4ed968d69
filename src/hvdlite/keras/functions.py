"""Collectives on the backend's tensors and ``broadcast_variables``, as Horovod's
``hvd.keras`` offers them. Each works eagerly and inside the backend's compiled functions
(``tf.function``, ``jax.jit``); the bridge does the crossing."""

from hvdlite import policy

from .backend import bridge


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=None, process_set=None):
    """All-reduce a value (number, numpy array or backend tensor); returns a backend tensor."""
    op = policy.resolve_op(op, average, "hvdlite.keras.allreduce")
    return bridge().allreduce(value, name, op, prescale_factor, postscale_factor,
                              bridge().Compression.none if compression is None else compression,
                              process_set)


def allgather(value, name=None, process_set=None):
    """Concatenate every rank's value along its first dimension; returns a backend tensor."""
    return bridge().allgather(value, name, process_set)


def broadcast(value, root_rank, name=None, process_set=None):
    """Every rank gets ``root_rank``'s value; returns a backend tensor."""
    return bridge().broadcast(value, int(root_rank), name, process_set)


def broadcast_variables(variables, root_rank, name=None, process_set=None):
    """Assign ``root_rank``'s values to ``variables`` (Keras variables) on every rank; all
    of them are broadcast together."""
    variables = list(variables)
    if not variables:
        return None
    return bridge().broadcast_variables(variables, int(root_rank), name, process_set)
