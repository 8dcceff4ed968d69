"""Local SGD: ``DistributedOptimizer(..., local_steps=H)``; the algorithm and its schedule are
:mod:`hvdlite.algorithms.local_sgd`'s, shared with Keras. The step count is saved in
``state_dict()`` under ``"hvdlite_local_sgd"``.
"""

import torch

from hvdlite.algorithms import local_sgd
from hvdlite.algorithms.extra_state import ExtraState

from ._wrap import SynchronizeProtocol, require_contiguous, wrap


class LocalSGDOptimizer(ExtraState, SynchronizeProtocol):
    """Methods placed in front of the wrapped optimizer's class."""

    EXTRA_KEY, SET_UP = "hvdlite_local_sgd", "_params"

    def _local_setup(self, names, schedule, average_state, process_set):
        self._process_set = process_set
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
        for p in self._params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        local_sgd.average([p.grad.detach() for p in self._params],
                          [f"localsgd.grad.{n}" for n in self._names], self._process_set)

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
                    if torch.is_tensor(v) and local_sgd.averages_state(v.dtype, v.dim()):
                        tensors.append(v)
                        names.append(f"localsgd.state.{n}.{key}")
        with torch.no_grad():
            local_sgd.average(tensors, names, self._process_set)

    def _extra_state(self):
        return {"steps_taken": self.steps_taken}

    def _load_extra_state(self, saved):
        self.steps_taken = int(saved["steps_taken"])


def make_local_sgd(optimizer, names, local_steps, warmup_steps, average_state,
                   process_set=None):
    schedule = local_sgd.LocalSGDSchedule(local_steps, warmup_steps, "DistributedOptimizer")
    opt = wrap(LocalSGDOptimizer, optimizer)
    opt._local_setup(names, schedule, average_state, process_set)
    return opt
