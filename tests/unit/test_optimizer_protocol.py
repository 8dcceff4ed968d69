"""hvdlite.optimizer_protocol: the wrapped optimizer instance and Horovod's
synchronize / skip_synchronize / step protocol, on a plain Python optimizer."""

import gc
import warnings
import weakref

import pytest

from hvdlite.optimizer_protocol import SynchronizeProtocol, remove_hooks, weak_hook, wrap


class PlainOptimizer:
    def __init__(self):
        self.param_groups = [{"lr": 0.1}]
        self.steps = 0

    def step(self, scale=1):
        self.steps += scale
        return "stepped"


class Counting(SynchronizeProtocol):
    def setup(self):
        self._init_protocol()
        self.reductions = 0

    def _reduce_gradients(self):
        self.reductions += 1


def make():
    opt = PlainOptimizer()
    dist = wrap(Counting, opt)
    dist.setup()
    return opt, dist


def test_wrap_shares_state_and_caches_the_class():
    opt, dist = make()
    assert isinstance(dist, PlainOptimizer) and isinstance(dist, Counting)
    assert type(dist).__name__ == "PlainOptimizer"
    assert dist.param_groups is opt.param_groups
    assert type(wrap(Counting, PlainOptimizer())) is type(dist)


def test_wrap_leaves_per_instance_step_wrappers_behind():
    opt = PlainOptimizer()
    opt.step = lambda: "bound to the old object"
    opt.zero_grad = lambda: None
    dist = wrap(Counting, opt)
    assert "step" not in dist.__dict__ and "zero_grad" not in dist.__dict__


def test_step_reduces_then_steps_with_its_arguments():
    _, dist = make()
    assert dist.step(3) == "stepped"
    assert (dist.reductions, dist.steps) == (1, 3)


def test_synchronize_then_skip_synchronize_reduces_once():
    _, dist = make()
    dist.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with dist.skip_synchronize():
            dist.step()
    assert (dist.reductions, dist.steps) == (1, 1)
    assert dist._should_synchronize        # restored on leaving the block


def test_step_after_synchronize_without_skip_warns_and_reduces_again():
    _, dist = make()
    dist.synchronize()
    with pytest.warns(UserWarning, match="skip_synchronize"):
        dist.step()
    assert dist.reductions == 2


def test_skip_synchronize_is_restored_after_an_error():
    _, dist = make()
    with pytest.raises(RuntimeError):
        with dist.skip_synchronize():
            raise RuntimeError("in the block")
    assert dist._should_synchronize


def test_weak_hook_calls_while_the_optimizer_lives():
    _, dist = make()
    calls = []
    dist.record = lambda *args: calls.append(args)
    hook = weak_hook(weakref.ref(dist), "record", 7)
    hook("grad")
    assert calls == [(7,)]
    del dist
    gc.collect()
    hook("grad")                           # the optimizer is gone: nothing to call
    assert calls == [(7,)]


def test_remove_hooks_removes_every_handle():
    removed = []

    class Handle:
        def __init__(self, i):
            self.i = i

        def remove(self):
            removed.append(self.i)
    remove_hooks([Handle(0), Handle(1)])
    assert removed == [0, 1]


def test_the_wrapped_class_follows_the_mixin_that_defines_the_marker():
    from hvdlite.optimizer_protocol import wrapped_class

    class Base:
        pass

    class Adam(Base):
        pass

    class Mixin:
        def _hvd_settings(self):
            return None

    class Loading(type("Adam", (Mixin, Adam), {})):     # e.g. load_model's subclass
        pass
    assert wrapped_class(type("Adam", (Mixin, Adam), {}), "_hvd_settings") is Adam
    assert wrapped_class(Loading, "_hvd_settings") is Adam


def test_an_optimizer_is_wrapped_once():
    from hvdlite.optimizer_protocol import check_unwrapped

    class Mixin:
        pass

    class SGD:
        pass
    check_unwrapped(SGD(), Mixin)
    with pytest.raises(ValueError, match="optimizer is already a DistributedOptimizer; "
                                         "wrapping it again would reduce every gradient twice"):
        check_unwrapped(wrap(Mixin, SGD()), Mixin)


def test_an_optimizer_class_or_another_type_is_a_type_error_for_every_adapter():
    from hvdlite.optimizer_protocol import check_optimizer

    class Mixin:
        pass

    class Optimizer:
        pass

    class SGD(Optimizer):
        pass
    check_optimizer(SGD(), Optimizer, Mixin, "fw.Optimizer")
    with pytest.raises(TypeError, match=r"expects an optimizer instance, got the class SGD; "
                                        r"pass e\.g\. SGD\(\.\.\.\)"):
        check_optimizer(SGD, Optimizer, Mixin, "fw.Optimizer")
    with pytest.raises(TypeError, match=r"wraps fw\.Optimizer instances; got builtins\.dict\. "
                                        r"Use another wrapper\."):
        check_optimizer({}, Optimizer, Mixin, "fw.Optimizer", ". Use another wrapper.")
    with pytest.raises(ValueError, match="already a DistributedOptimizer"):
        check_optimizer(wrap(Mixin, SGD()), Optimizer, Mixin, "fw.Optimizer")
