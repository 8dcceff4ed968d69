"""What every ``DistributedOptimizer`` wrapper shares, free of any framework: the wrapped
instance (a subclass of ``(mixin, type(optimizer))`` sharing the optimizer's state), the
class it wraps, what may be wrapped (an instance, once), Horovod's ``synchronize()`` /
``skip_synchronize()`` / ``step()`` protocol, and the hooks that hold the optimizer weakly
(they sit on parameters, which may outlive it).

The torch adapter (:mod:`hvdlite.torch._wrap`) adds what is torch's: autograd hooks and
contiguity checks.
"""

import warnings
from contextlib import contextmanager

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


def check_optimizer(optimizer, base, wrapper, base_name, other_frameworks=""):
    """What ``DistributedOptimizer(optimizer)`` accepts, for every adapter: an instance of
    ``base`` (the framework's optimizer class, ``base_name`` as users write it) that is not
    already wrapped (an instance of ``wrapper``, the adapter's mixin). TypeError names a class
    passed for an instance (the usual slip: ``DistributedOptimizer(SGD)``) or another type,
    with ``other_frameworks`` saying what to use for those; ValueError an optimizer wrapped
    already."""
    if isinstance(optimizer, type):
        raise TypeError(f"hvdlite DistributedOptimizer expects an optimizer instance, got the "
                        f"class {optimizer.__name__}; pass e.g. {optimizer.__name__}(...)")
    if not isinstance(optimizer, base):
        got = f"{type(optimizer).__module__}.{type(optimizer).__qualname__}"
        raise TypeError(f"hvdlite DistributedOptimizer wraps {base_name} instances; got "
                        f"{got}{other_frameworks}")
    check_unwrapped(optimizer, wrapper)


def check_unwrapped(optimizer, wrapper):
    """Refuse to wrap an optimizer that already is a ``DistributedOptimizer`` (an instance of
    ``wrapper``, the adapter's mixin): every gradient would be reduced twice."""
    if isinstance(optimizer, wrapper):
        raise ValueError("optimizer is already a DistributedOptimizer; wrapping it again would "
                         "reduce every gradient twice")


def wrapped_class(cls, marker):
    """The optimizer class a wrapper class ``cls`` wraps: the one after the mixin that
    defines ``marker`` in ``cls``'s MRO (the mixin goes first, as :func:`wrap` puts it)."""
    mro = cls.__mro__
    return mro[next(i for i, c in enumerate(mro) if marker in vars(c)) + 1]


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


def weak_hook(opt_ref, method, *args):
    """A hook calling ``opt_ref().method(*args)`` while the optimizer lives (hooks sit on the
    parameters, which may outlive the optimizer)."""
    def hook(*_):
        opt = opt_ref()
        if opt is not None:
            getattr(opt, method)(*args)
    return hook


def remove_hooks(handles):
    for h in handles:
        h.remove()
