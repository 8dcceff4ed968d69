"""Local SGD: ``DistributedOptimizer(..., local_steps=H)``.

Ranks step independently on their own gradients and average their parameters (and, with
``average_optimizer_state=True``, the optimizer's floating-point state such as momentum
buffers) every H steps: one all-reduce of the parameters per H steps instead of one of the
gradients per step, so H times fewer bytes. The first ``local_sgd_warmup_steps`` steps are
ordinary synchronous steps (gradients averaged before each update): post-local SGD
(Lin et al., 2020), which keeps the early, fast-moving phase of training synchronous.

With H=1 and plain SGD (or SGD with momentum and ``average_optimizer_state=True``) every
step equals a synchronous step: the update is linear in the gradient, so the mean of the
ranks' updated parameters is the update with the mean gradient (up to float rounding).
"""

import torch

from hvdlite import ops as _ops
from hvdlite.algorithms.local_sgd import LocalSGDSchedule
from hvdlite.policy import Average

from ._wrap import SynchronizeProtocol, require_contiguous, wrap

_STATE_KEY = "hvdlite_local_sgd"


class LocalSGDOptimizer(SynchronizeProtocol):
    """Methods placed in front of the wrapped optimizer's class."""

    def _local_setup(self, names, schedule, average_state, process_set):
        self._set_kw = {} if process_set is None else {"process_set": process_set}
        self._schedule = schedule
        self.local_steps = schedule.local_steps
        self.local_sgd_warmup_steps = schedule.warmup_steps
        self.average_optimizer_state = bool(average_state)
        self._params = require_contiguous(
            [p for g in self.param_groups for p in g["params"] if p.requires_grad], names,
            "DistributedOptimizer(local_steps=...)")
        self._names = [names[id(p)] for p in self._params]
        self.steps_taken = 0
        self._init_protocol()

    def _reduce_gradients(self):
        if not self._schedule.in_warmup(self.steps_taken):
            return          # local steps use this rank's own gradients
        grads = []
        for p in self._params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad.detach())
        _ops.wait_all(_ops.grouped_allreduce_async(
            grads, None, [f"localsgd.grad.{n}" for n in self._names], Average, **self._set_kw))

    def _apply_step(self, *args, **kwargs):
        result = self._base_step(*args, **kwargs)
        self.steps_taken += 1
        if self._schedule.averages_after(self.steps_taken):
            self.average_parameters()
        return result

    def average_parameters(self):
        """Average the parameters (and optimizer state, if asked) over ranks now."""
        tensors = [p.detach() for p in self._params]
        names = [f"localsgd.param.{n}" for n in self._names]
        if self.average_optimizer_state:
            for p, n in zip(self._params, self._names):
                for key, v in sorted(self.state.get(p, {}).items()):
                    if torch.is_tensor(v) and v.is_floating_point() and v.dim() > 0:
                        tensors.append(v)
                        names.append(f"localsgd.state.{n}.{key}")
        with torch.no_grad():
            _ops.wait_all(_ops.grouped_allreduce_async(tensors, None, names, Average,
                                                       **self._set_kw))

    def state_dict(self):
        sd = super().state_dict()
        sd[_STATE_KEY] = {"steps_taken": self.steps_taken}
        return sd

    def load_state_dict(self, state_dict):
        state_dict = dict(state_dict)
        saved = state_dict.pop(_STATE_KEY, None)
        super().load_state_dict(state_dict)
        if saved is not None and "_params" in self.__dict__:
            self.steps_taken = int(saved["steps_taken"])


def make_local_sgd(optimizer, names, local_steps, warmup_steps, average_state,
                   process_set=None):
    schedule = LocalSGDSchedule(local_steps, warmup_steps, "DistributedOptimizer")
    opt = wrap(LocalSGDOptimizer, optimizer)
    opt._local_setup(names, schedule, average_state, process_set)
    return opt
