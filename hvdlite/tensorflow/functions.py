"""Variable and Python-object helpers: ``broadcast_variables``, ``broadcast_object``,
``allgather_object``."""

import io
import pickle

import numpy as np
import tensorflow as tf

import hvdlite as _hvd
from hvdlite import ops as _ops

from .mpi_ops import _broadcast_cross, check_dtype, op_name

try:  # cloudpickle handles lambdas and local classes; plain pickle is the fallback
    import cloudpickle as _pickler
except ImportError:  # pragma: no cover
    _pickler = pickle


def _read(var):
    """A variable's (tf.Variable or Keras variable) or tensor's value as a tensor."""
    return tf.convert_to_tensor(var)


def _var_label(var, i):
    return getattr(var, "path", None) or getattr(var, "name", None) or f"variable {i}"


def broadcast_variables(variables, root_rank, name=None):
    """Assign ``root_rank``'s values to ``variables`` on every rank.

    Works for ``tf.Variable`` and Keras variables, eagerly (returns None) and inside a
    ``tf.function`` (returns the grouped assign op). All variables go to the core
    together, so they negotiate in the same round.
    """
    variables = list(variables)
    if not variables:
        return None if tf.executing_eagerly() else tf.no_op()
    root_rank = _ops.root_rank_arg(root_rank)
    values = [_read(v) for v in variables]
    for i, (v, t) in enumerate(zip(variables, values)):
        check_dtype(t, "broadcast_variables", _var_label(v, i))
    base = op_name("broadcast_variables", name)
    names = None if base is None else [f"{base}.{i}" for i in range(len(variables))]
    new_values = _broadcast_cross(values, root_rank, names, "HvdliteBroadcastVariables")
    assigns = [v.assign(nv) for v, nv in zip(variables, new_values)]
    if tf.executing_eagerly():
        return None
    return tf.group(*[a for a in assigns if a is not None])


def _to_bytes(obj):
    buf = io.BytesIO()
    _pickler.dump(obj, buf)
    return np.frombuffer(buf.getvalue(), dtype=np.uint8)


def broadcast_object(obj, root_rank=0, name=None):
    """Pickle ``obj`` on ``root_rank`` and return the unpickled copy on every rank.

    Call it eagerly (outside ``tf.function``); every rank must call it.
    """
    root_rank = _ops.root_rank_arg(root_rank)
    prefix = name or "broadcast_object"
    if _hvd.rank() == root_rank:
        payload = _to_bytes(obj)
        length = np.array([payload.size], dtype=np.int64)
    else:
        payload = None
        length = np.zeros(1, dtype=np.int64)
    _ops.wait(_ops.broadcast_async(length, root_rank, name=f"{prefix}.len"))
    if payload is None:
        payload = np.empty(int(length[0]), dtype=np.uint8)
    else:
        payload = payload.copy()  # the core writes into the buffer (in place on every rank)
    _ops.wait(_ops.broadcast_async(payload, root_rank, name=f"{prefix}.data"))
    if _hvd.rank() == root_rank:
        return obj
    return pickle.loads(payload.tobytes())


def allgather_object(obj, name=None):
    """Pickle ``obj`` on every rank and return the list of every rank's object, in rank
    order. Call it eagerly; every rank must call it."""
    prefix = name or "allgather_object"
    payload = _to_bytes(obj)
    lengths = _ops.wait(_ops.allgather_async(np.array([payload.size], dtype=np.int64),
                                             name=f"{prefix}.len")).output
    data = _ops.wait(_ops.allgather_async(payload, name=f"{prefix}.data")).output
    data = np.asarray(data, dtype=np.uint8)
    out, offset = [], 0
    for n in np.asarray(lengths).reshape(-1).tolist():
        out.append(pickle.loads(data[offset:offset + n].tobytes()))
        offset += n
    return out
