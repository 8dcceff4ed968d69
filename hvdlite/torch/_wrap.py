"""What the optimizer wrappers beyond Horovod's (sharded state, local SGD, stateful
compression) share: building the wrapped instance, parameter names, and the
synchronize/skip_synchronize protocol of ``DistributedOptimizer``.
"""

import warnings
from contextlib import contextmanager

import torch

from hvdlite import policy

_class_cache = {}


def wrap(mixin, optimizer):
    """An instance of ``(mixin, type(optimizer))`` sharing ``optimizer``'s state and groups.

    Per-instance ``step``/``zero_grad`` wrappers (e.g. an LR scheduler's) are bound to the old
    object, so they are left behind; the caller then runs the mixin's own setup.
    """
    base = type(optimizer)
    cls = _class_cache.get((mixin, base))
    if cls is None:
        cls = type(base.__name__, (mixin, base), {})
        _class_cache[(mixin, base)] = cls
    obj = cls.__new__(cls)
    obj.__dict__.update({k: v for k, v in optimizer.__dict__.items()
                         if k not in ("step", "zero_grad")})
    return obj


def parameter_names(optimizer, named_parameters, what):
    """{id(param): name} for every parameter ``optimizer`` holds (policy.parameter_names)."""
    return policy.parameter_names([g["params"] for g in optimizer.param_groups],
                                  named_parameters, what)


class SynchronizeProtocol:
    """``synchronize()`` / ``skip_synchronize()`` / ``step()`` of every ``DistributedOptimizer``
    (Horovod's all-reduce and the options beyond it).

    Subclasses implement ``_reduce_gradients()``, and ``_apply_step(*step_args)`` where the
    update is more than the wrapped optimizer's own step.
    """

    def _init_protocol(self):
        self._synchronized = False
        self._should_synchronize = True

    def synchronize(self):
        """Reduce the gradients now. Afterwards step with ``with optimizer.skip_synchronize():
        optimizer.step()`` so as not to synchronize again (e.g. after clipping)."""
        self._reduce_gradients()
        self._synchronized = True

    @contextmanager
    def skip_synchronize(self):
        """Make ``step()`` skip ``synchronize()`` (call ``synchronize()`` yourself first)::

            optimizer.synchronize()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            with optimizer.skip_synchronize():
                optimizer.step()
        """
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, *args, **kwargs):
        if self._should_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize(). This can cause training "
                              "slowdown. You may want to consider using "
                              "optimizer.skip_synchronize() context if you use "
                              "optimizer.synchronize() in your code.")
            self._reduce_gradients()
        self._synchronized = False
        return self._apply_step(*args, **kwargs)

    def _base_step(self, *args, **kwargs):
        """The wrapped optimizer's own step()."""
        return super().step(*args, **kwargs)

    _apply_step = _base_step

    # torch.optim.Optimizer wraps a class's step() with its hook machinery when the first
    # instance is built; the wrapped class's own step() already is.
    step.hooked = True


def weak_hook(opt_ref, method, *args):
    """A tensor hook calling ``opt_ref().method(*args)`` while the optimizer lives (hooks sit
    on the parameters, which may outlive the optimizer)."""
    def hook(*_):
        opt = opt_ref()
        if opt is not None:
            getattr(opt, method)(*args)
    return hook


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


def remove_hooks(handles):
    for h in handles:
        h.remove()


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
