"""The PyTorch bridge: Keras' torch trainer runs eagerly (gradients are torch tensors on
``variable.value.grad``), so the core requests on torch tensors of
:mod:`hvdlite.convert.torch_requests` serve it as they are (no autograd: Keras applies
the reduced gradients itself)."""

import numpy as np
import torch

from hvdlite import ops as _ops, policy
from hvdlite.convert import torch_requests as requests
from hvdlite.exceptions import HvdliteError, raise_replaced
from hvdlite.work import wait_all
from hvdlite.convert.host_call import on_host
from hvdlite.convert.torch_compression import Compression  # noqa: F401 - bridge interface


def gradient_reducer(name, op, predivide, compression, sparse_as_dense, process_set, what):
    def reduce(grads, variables, when=None):
        if when is not None and not bool(when):
            return list(grads)

        def reduced(present):
            true_op, prescale, postscale = policy.reduction(op, predivide, process_set)
            names = policy.group_names(name, len(present))
            labels = {n: f"gradient of {policy.variable_label(variables[i], i)}"
                      for n, i in zip(names, present)}
            try:
                return requests.allreduce_group([grads[i] for i in present], names, true_op,
                                                prescale, postscale, compression, process_set,
                                                "grouped_allreduce")
            except HvdliteError as e:
                raise_replaced(e, policy.with_labels(e, labels))
        return policy.reduce_present(grads, reduced)

    return reduce


def host_call(fn, args, out_specs, when=None):
    """See hvdlite.keras.bridges (Keras' torch trainer is eager: a direct call)."""
    run = True if when is None else bool(when)
    out = on_host(fn, out_specs)(run, *[_tensor(a).detach().cpu().numpy() for a in args])
    return [torch.from_numpy(np.array(o, order="C")) for o in out]


def dense_gradient(g, label, sparse_as_dense, what):
    return g.to_dense() if g.is_sparse else g


def cond(pred, true_fn, false_fn, variables):
    return true_fn() if bool(pred) else false_fn()


def _tensor(value):
    return value if isinstance(value, torch.Tensor) else torch.as_tensor(value)


def allreduce(value, name, op, prescale_factor, postscale_factor, compression, process_set):
    return requests.allreduce_group([_tensor(value)], [name], op, prescale_factor,
                                    postscale_factor, compression, process_set, "allreduce")[0]


def allgather(value, name, process_set):
    return requests.start_allgather([_tensor(value)], [name], process_set, "allgather",
                                    True).wait()


def broadcast(value, root_rank, name, process_set):
    return requests.start_broadcast(_tensor(value), root_rank, name, process_set, False,
                                    "broadcast").wait()


def broadcast_variables(variables, root_rank, name, process_set):
    """Broadcast Keras variables in place: their values are torch Parameters."""
    base = _ops.auto_name("broadcast_variables", name)
    wait_all([requests.start_broadcast(v.value.data, root_rank, f"{base}.{i}", process_set,
                                       True, "broadcast_async_")
              for i, v in enumerate(variables)])
