"""What the torch optimizer wrappers (Horovod's and those beyond it: sharded state, local
SGD, stateful compression) share on top of :mod:`hvdlite.optimizer_protocol`: parameter
names, gradient hooks, and the checks on parameters written back in place.
"""

import torch

from hvdlite import policy
# Framework-free, re-exported for the optimizer wrappers beside this module.
from hvdlite.optimizer_protocol import (SynchronizeProtocol, remove_hooks,  # noqa: F401
                                        weak_hook, wrap)

# torch.optim.Optimizer wraps a class's step() with its hook machinery when the first
# instance is built; the wrapped class's own step() already is.
SynchronizeProtocol.step.hooked = True


def parameter_names(optimizer, named_parameters, what):
    """{id(param): name} for every parameter ``optimizer`` holds (policy.parameter_names)."""
    return policy.parameter_names([g["params"] for g in optimizer.param_groups],
                                  named_parameters, what)


def watch_gradient(p, opt_ref, key, before, ready, handles):
    """Hook parameter ``p``: the optimizer's method ``before(key)`` runs before autograd
    adds a gradient into ``p.grad``, ``ready(key)`` once it has (handles go to ``handles``).
    Returns p's AccumulateGrad node, which the caller keeps alive so that it stays p's."""
    with torch.enable_grad():
        grad_acc = p.view_as(p).grad_fn.next_functions[0][0]
    handles.append(p.register_hook(weak_hook(opt_ref, before, key)))
    handles.append(p.register_post_accumulate_grad_hook(weak_hook(opt_ref, ready, key)))
    return grad_acc


def refuse_extra_pass(countdown, key, grad_acc, name):
    """Before autograd accumulates: a pass beyond ``backward_passes_per_step`` is refused
    before it adds into a buffer that is being reduced."""
    if countdown.exhausted(key) and will_accumulate(grad_acc):
        countdown.too_many(name)


def will_accumulate(grad_acc):
    """Whether the running backward pass will accumulate into this parameter's .grad."""
    will_execute = getattr(torch._C, "_will_engine_execute_node", None)
    if will_execute is None:
        return True
    try:
        return bool(will_execute(grad_acc))
    except RuntimeError:
        return False    # torch.autograd.grad(): returns gradients, leaves .grad alone


def flat_view(tensor):
    """``tensor`` as a 1-D tensor sharing its memory (it must be contiguous)."""
    return tensor.detach().view(-1)


def require_contiguous(params, names, what):
    for p in params:
        if not p.is_contiguous():
            raise ValueError(f"{what}: parameter '{names[id(p)]}' (shape {list(p.shape)}) is "
                             f"not contiguous; its values are written back in place")
        if p.device.type != "cpu":
            raise ValueError(f"{what}: parameter '{names[id(p)]}' is on {p.device}; this "
                             f"option runs on CPU parameters only (hvdlite has no NCCL)")
    return params
