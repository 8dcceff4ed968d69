"""``DistributedOptimizer(op=Adasum)``: Horovod's ``_DistributedAdasumOptimizer``.

Note [Adasum optimizer]
With Adasum Horovod does not reduce gradients: it reduces each parameter's UPDATE. Adasum
combines vectors by their directions, which is only meaningful for what the optimizer
would actually apply (momentum, Adam's scaling and the learning rate included), so each
rank steps its own optimizer on its own gradient and Adasum merges the resulting deltas:

- once a parameter's gradient is ready (after ``backward_passes_per_step`` passes), the
  wrapped optimizer steps that parameter alone (its param groups narrowed to it), the delta
  ``new - old`` replaces the parameter's value, and its in-place Adasum all-reduce starts,
  overlapping the rest of backward;
- ``step()`` starts those not started yet, then for each: ``start += reduced delta`` and the
  parameter becomes ``start`` (the value every rank agrees on).

Every rank's optimizer state (momentum, Adam moments) stays its own, from its own gradients,
exactly as in Horovod. ``synchronize()`` does nothing and ``skip_synchronize()`` is refused
(there are no gradients to reduce). Every parameter that requires a gradient gets a zero
gradient at wrapping (Horovod does the same), so a parameter no backward reached still steps.
At one rank (or op other than Adasum) the usual wrapper runs instead (see DistributedOptimizer).
"""

import weakref
from contextlib import contextmanager

import torch

from hvdlite import policy
from hvdlite.algorithms.accumulation import check_passes
from hvdlite.convert.torch_requests import submit_allreduce
from hvdlite.convert.torch_tensors import Staged, check_tensors, group_wire
from hvdlite.policy import Adasum

from ._wrap import SynchronizeProtocol, parameter_names, remove_hooks, watch_gradient


class _DistributedAdasumOptimizer(SynchronizeProtocol):
    """Methods placed in front of the wrapped optimizer's class (Note [Adasum optimizer])."""

    def _hvd_adasum_setup(self, named_parameters, compression, backward_passes_per_step,
                          process_set):
        check_passes(backward_passes_per_step)
        self._compression = compression
        self.backward_passes_per_step = int(backward_passes_per_step)
        self.op = Adasum
        self._hvd_process_set = process_set
        self._hvd_python_compression = policy.wire_format(compression, "float32")[1]
        names_by_id = parameter_names(self, named_parameters, "allreduce")
        self._parameter_names = {}
        self._hvd_params, self._hvd_names, self._hvd_index = [], [], {}
        self._hvd_starts = []        # per parameter: its value before the local step
        self._hvd_delay = []         # per parameter: backward passes still to come
        self._hvd_started = {}       # index -> (Work, compression context) in flight
        self._hvd_hook_handles, self._hvd_grad_accs = [], []
        self._init_protocol()
        self_ref = weakref.ref(self)
        weakref.finalize(self, remove_hooks, self._hvd_hook_handles)
        for group in self.param_groups:
            for p in group["params"]:
                self._parameter_names[p] = names_by_id[id(p)]
                if not p.requires_grad or p in self._hvd_index:
                    continue
                index = len(self._hvd_params)
                self._hvd_index[p] = index
                self._hvd_params.append(p)
                self._hvd_names.append(names_by_id[id(p)])
                self._hvd_starts.append(torch.zeros_like(p, requires_grad=False))
                self._hvd_delay.append(self.backward_passes_per_step)
                p.grad = torch.zeros_like(p)
                self._hvd_grad_accs.append(watch_gradient(
                    p, self_ref, index, "_hvd_adasum_before", "_hvd_adasum_ready",
                    self._hvd_hook_handles))

    # -- hooks ----------------------------------------------------------------------------

    def _hvd_adasum_before(self, index):
        pass  # an extra pass is refused once it has accumulated, as in Horovod

    def _hvd_adasum_ready(self, index):
        if self._hvd_delay[index] <= 0:
            raise AssertionError(
                "Gradients were computed more than backward_passes_per_step times before call "
                "to step(). Increase backward_passes_per_step to accumulate gradients locally.")
        self._hvd_delay[index] -= 1
        if self._hvd_delay[index] == 0:
            self._hvd_started[index] = self._hvd_adasum_start(index)

    # -- the delta and its all-reduce -----------------------------------------------------

    def _hvd_adasum_start(self, index):
        """Step the wrapped optimizer on parameter ``index`` alone, leave the delta in it and
        start its in-place Adasum all-reduce."""
        p, start = self._hvd_params[index], self._hvd_starts[index]
        stashed = [group["params"] for group in self.param_groups]
        for group in self.param_groups:
            group["params"] = [p] if any(p is v for v in group["params"]) else []
        try:
            with torch.no_grad():
                start.copy_(p.data)
            self._base_step()
        finally:
            for group, params in zip(self.param_groups, stashed):
                group["params"] = params
        with torch.no_grad():
            p.data.sub_(start)  # .data: no version bump a saved tensor would notice
        sent, ctxs = policy.compressed(self._compression, [p.data], self._hvd_python_compression)
        names = [self._hvd_names[index]]
        check_tensors(sent, names, "DistributedOptimizer")
        work = submit_allreduce(Staged(sent, inplace=True), names, Adasum, 1.0, 1.0,
                                group_wire(self._compression, sent)[0], self._hvd_process_set)
        return work, ctxs[0]

    # -- the optimizer interface ----------------------------------------------------------

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for index in range(len(self._hvd_params)):
            if index not in self._hvd_started:
                self._hvd_started[index] = self._hvd_adasum_start(index)
        error = None
        try:
            for index, (work, ctx) in sorted(self._hvd_started.items()):
                try:
                    delta = work.wait()[0]
                except BaseException as e:  # noqa: B036 - wait for all, re-raise the first
                    error = error or e
                    continue
                delta = policy.decompressed(self._compression, [delta], [ctx],
                                            self._hvd_python_compression)[0]
                with torch.no_grad():
                    start = self._hvd_starts[index]
                    start.add_(delta.to(start.dtype))
                    self._hvd_params[index].data.copy_(start)
        finally:
            self._hvd_started.clear()
            self._hvd_delay = [self.backward_passes_per_step] * len(self._hvd_params)
        if error is not None:
            raise error
        return loss

    step.hooked = True  # torch.optim.Optimizer must not wrap it again (see _wrap.py)

    def synchronize(self):
        pass  # Horovod's: the deltas are reduced in step()

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError(
            "Skipping synchronization is not supported when using Adasum optimizer.")
        yield  # pragma: no cover

    def zero_grad(self, *args, **kwargs):
        if self._hvd_started:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super().zero_grad(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        check_passes(passes)
        self.backward_passes_per_step = int(passes)
        self._hvd_delay = [self.backward_passes_per_step] * len(self._hvd_params)
