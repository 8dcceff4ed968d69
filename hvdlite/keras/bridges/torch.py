"""The PyTorch bridge: Keras' torch trainer runs eagerly (gradients are torch tensors on
``variable.value.grad``), so hvdlite.torch's collectives serve it as they are."""

import numpy as np
import torch

import hvdlite.torch as _hvd_torch
from hvdlite import ops as _ops
from hvdlite.exceptions import HvdliteError, raise_replaced
from hvdlite.torch import Compression  # noqa: F401 - part of the bridge interface

from ..labels import process_set_kwargs, reduction, variable_label, with_labels


def gradient_reducer(name, op, predivide, compression, sparse_as_dense, process_set, what):
    def reduce(grads, variables, when=None):
        grads = list(grads)
        if when is not None and not bool(when):
            return grads
        present = [i for i, g in enumerate(grads) if g is not None]
        if not present:
            return grads
        true_op, prescale, postscale = reduction(op, predivide, process_set)
        labels = {f"{name}.{k}": variable_label(variables[i], i)
                  for k, i in enumerate(present)}
        try:
            reduced = _hvd_torch.grouped_allreduce(
                [grads[i] for i in present], name=name, op=true_op, prescale_factor=prescale,
                postscale_factor=postscale, compression=compression,
                **process_set_kwargs(_hvd_torch.grouped_allreduce, process_set))
        except HvdliteError as e:
            raise_replaced(e, with_labels(e, labels))
        for i, r in zip(present, reduced):
            grads[i] = r
        return grads

    return reduce


def host_call(fn, args, out_specs, when=None):
    """See hvdlite.keras.bridges (Keras' torch trainer is eager: a direct call)."""
    run = True if when is None else bool(when)
    arrays = [np.array(_tensor(a).detach().cpu().numpy(), copy=True) for a in args]
    out = fn(run, *arrays)
    return [torch.from_numpy(np.array(o, dtype=d, order="C").reshape(s))
            for o, (s, d) in zip(out, out_specs)]


def dense_gradient(g, label, sparse_as_dense, what):
    return g.to_dense() if g.is_sparse else g


def cond(pred, true_fn, false_fn, variables):
    return true_fn() if bool(pred) else false_fn()


def _tensor(value):
    return value if isinstance(value, torch.Tensor) else torch.as_tensor(value)


def allreduce(value, name, op, prescale_factor, postscale_factor, compression, process_set):
    return _hvd_torch.allreduce(_tensor(value), name=name, op=op,
                                prescale_factor=prescale_factor,
                                postscale_factor=postscale_factor, compression=compression,
                                **process_set_kwargs(_hvd_torch.allreduce, process_set))


def allgather(value, name, process_set):
    return _hvd_torch.allgather(_tensor(value), name=name,
                                **process_set_kwargs(_hvd_torch.allgather, process_set))


def broadcast(value, root_rank, name, process_set):
    return _hvd_torch.broadcast(_tensor(value), root_rank, name=name,
                                **process_set_kwargs(_hvd_torch.broadcast, process_set))


def broadcast_variables(variables, root_rank, name, process_set):
    """Broadcast Keras variables in place: their values are torch Parameters."""
    base = _ops.auto_name("broadcast_variables", name)
    ps = process_set_kwargs(_hvd_torch.broadcast_async_, process_set)
    handles = [_hvd_torch.broadcast_async_(v.value.data, root_rank, name=f"{base}.{i}",
                                           **ps)
               for i, v in enumerate(variables)]
    for h in handles:
        _hvd_torch.synchronize(h)
