"""``DistributedOptimizer``: all-reduce gradients while backward is still running.

Each parameter's gradient all-reduce is enqueued on the core from
``Tensor.register_post_accumulate_grad_hook`` the moment autograd has finished
accumulating that gradient, so communication overlaps the rest of the backward pass;
``step()`` (or ``synchronize()``) waits for them and then runs the wrapped optimizer.
"""

import weakref

import torch

from hvdlite import basics, policy
from hvdlite.algorithms.accumulation import (Countdown, GradientAccumulationError,  # noqa: F401
                                              check_passes)
from hvdlite.convert.torch_requests import submit_allreduce
from hvdlite.convert.torch_tensors import Staged, check_tensors, group_wire
from hvdlite.numpy_api import broadcast_object
from hvdlite.optimizer_protocol import check_optimizer
from hvdlite.process_sets import none_if_global
from hvdlite.work import wait_all

from . import extended as _extended
from ._wrap import (SynchronizeProtocol, parameter_names, refuse_extra_pass, remove_hooks,
                    watch_gradient, wrap)
from .compression import Compression
from .adasum_optimizer import _DistributedAdasumOptimizer
from .mpi_ops import Adasum, Average, global_process_set, sparse_allreduce_async


class _GradReduction:
    """The all-reduce of one parameter's gradient, or of one group of them."""

    __slots__ = ("works", "targets", "ctxs", "sparse")

    def __init__(self):
        self.works = []     # the dense group's Work, then one per sparse gradient
        self.targets = []   # per dense gradient: (grad, (param, sparse_dim) if densified)
        self.ctxs = []      # per dense gradient: its Python-side compression's context
        self.sparse = []    # (param, Work of sparse_allreduce_async)

    def finish(self, compression, python_side):
        reduced = wait_all(self.works)
        with torch.no_grad():
            if self.targets:
                outs = policy.decompressed(compression, reduced[0], self.ctxs, python_side)
                for (grad, sparse_param), out in zip(self.targets, outs):
                    if sparse_param is not None:
                        param, sparse_dim = sparse_param
                        param.grad = out.to_sparse(sparse_dim)
                    elif out is not grad:
                        grad.copy_(out)
            for p, work in self.sparse:
                p.grad = work.wait()


class _DistributedOptimizer(SynchronizeProtocol):
    """Methods placed in front of the wrapped optimizer's class (see DistributedOptimizer)."""

    # -- setup --------------------------------------------------------------------------

    def _hvd_setup(self, named_parameters, compression, backward_passes_per_step, op,
                   gradient_predivide_factor, groups, sparse_as_dense, process_set):
        self._compression = compression
        self.backward_passes_per_step = int(backward_passes_per_step)
        self.op = op
        self.gradient_predivide_factor = float(gradient_predivide_factor)
        self.sparse_as_dense = bool(sparse_as_dense)
        self._hvd_process_set = process_set
        self._hvd_size = process_set.size()
        # As in Horovod, a rank outside the set reduces nothing: it steps on its own gradients.
        self._hvd_reduces = self._hvd_size > 1 and process_set.included()
        # float32 stands for the gradients here: the built-in compressors go to the core
        self._hvd_python_compression = policy.wire_format(compression, "float32")[1]

        names_by_id = parameter_names(self, named_parameters, "allreduce")
        self._parameter_names = {}
        self._hvd_params = []          # parameters whose gradients get all-reduced, in order
        self._hvd_names = []
        self._hvd_index = {}           # param -> position in _hvd_params
        self._hvd_hook_handles = []
        self._hvd_grad_accs = []
        self._hvd_pending = {}         # (indices reduced together) -> _GradReduction
        self._hvd_countdown = Countdown(backward_passes_per_step)
        self._init_protocol()
        self._hvd_self_ref = weakref.ref(self)
        # The hooks live on the parameters: take them off when this optimizer goes away.
        weakref.finalize(self, remove_hooks, self._hvd_hook_handles)
        for group in self.param_groups:
            for p in group["params"]:
                self._parameter_names[p] = names_by_id[id(p)]
                if p.requires_grad and p not in self._hvd_index:
                    self._hvd_add_param(p, names_by_id[id(p)])
        self._hvd_setup_groups(groups)

    def _hvd_add_param(self, p, name):
        if not p.is_leaf:
            raise ValueError(f"DistributedOptimizer: parameter '{name}' is not a leaf tensor; "
                             f"only leaf tensors accumulate gradients")
        index = len(self._hvd_params)
        self._hvd_params.append(p)
        self._hvd_names.append(name)
        self._hvd_index[p] = index
        self._hvd_countdown.add(index)
        self._hvd_grad_accs.append(watch_gradient(
            p, self._hvd_self_ref, index, "_hvd_before_accumulate", "_hvd_grad_ready",
            self._hvd_hook_handles))

    def _hvd_setup_groups(self, groups):
        self._groups = groups
        policy.check_groups(groups, "torch.Tensor")
        if groups is None:
            return
        params = list(self._hvd_params)
        if self._hvd_size > 1:
            # Same grouping on every rank: order the parameters as rank 0 does.
            pos = policy.rank0_positions(self._hvd_names, broadcast_object,
                                         "DistributedOptimizer")
            params.sort(key=lambda p: pos[self._hvd_names[self._hvd_index[p]]])
        for chunk in policy.plan_groups(params, groups, torch.is_tensor, "torch.Tensor"):
            self._hvd_countdown.group(self._hvd_index[p] for p in chunk)

    # -- reductions ---------------------------------------------------------------------

    def _hvd_start(self, indices):
        """Enqueue the all-reduce of the gradients of parameters ``indices`` (one group)."""
        red, grads, names = _GradReduction(), [], []
        for i in indices:
            p, name = self._hvd_params[i], self._hvd_names[i]
            if p.grad is None:
                # No gradient on this rank this step (unused in this forward): others may
                # have one, so contribute zeros and keep every rank in step (as Horovod).
                p.grad = torch.zeros_like(p, memory_format=torch.preserve_format)
            grad, sparse_param = p.grad, None
            if grad.is_sparse:
                if not self.sparse_as_dense:
                    work = sparse_allreduce_async(grad, name, self.op, self._hvd_process_set)
                    red.works.append(work)
                    red.sparse.append((p, work))
                    continue
                sparse_param, grad = (p, grad.sparse_dim()), grad.to_dense()
            red.targets.append((grad, sparse_param))
            grads.append(grad)
            names.append(name)
        if grads:
            sent, red.ctxs = policy.compressed(self._compression, grads,
                                               self._hvd_python_compression)
            check_tensors(sent, names, "DistributedOptimizer")
            op, pre, post = policy.predivide(self.op, self.gradient_predivide_factor,
                                              self._hvd_size)
            # Reduced in place (staged copies are written back). CUDA gradients: submitted
            # with the current stream, never waited for here (the hook must not block the
            # host); step()'s wait makes the stream wait.
            red.works.insert(0, submit_allreduce(
                Staged(sent, inplace=True), names, op, pre, post,
                group_wire(self._compression, sent)[0], self._hvd_process_set))
        return red

    def _hvd_grad_ready(self, i):
        """Called by autograd once parameter ``i``'s gradient is fully accumulated."""
        done = self._hvd_countdown.arrive(i, self._hvd_names[i])    # i, or i's whole group
        if done and self._hvd_reduces:
            self._hvd_pending[done] = self._hvd_start(done)

    def _reduce_gradients(self):
        """Finish the all-reduce of every gradient (starting those not started yet);
        parameters that got no gradient on this rank contribute zeros."""
        try:
            if self._hvd_reduces:
                for done in self._hvd_countdown.units():
                    if done not in self._hvd_pending:
                        self._hvd_pending[done] = self._hvd_start(done)
            error = None
            for red in self._hvd_pending.values():
                try:
                    red.finish(self._compression, self._hvd_python_compression)
                except BaseException as e:  # noqa: B036 - wait for all, re-raise the first
                    error = error or e
            if error is not None:
                raise error
        finally:
            self._hvd_reset()

    def _hvd_reset(self):
        self._hvd_pending.clear()
        self._hvd_countdown.reset()

    # -- the optimizer interface --------------------------------------------------------

    def _hvd_before_accumulate(self, index):
        # Runs before autograd accumulates the new gradient into p.grad: refusing an extra
        # backward pass here keeps it from adding into a buffer that is being all-reduced.
        refuse_extra_pass(self._hvd_countdown, index, self._hvd_grad_accs[index],
                          self._hvd_names[index])

    def zero_grad(self, *args, **kwargs):
        self._hvd_countdown.refuse_zero_grad(bool(self._hvd_pending))
        return super().zero_grad(*args, **kwargs)

    def set_backward_passes_per_step(self, passes):
        self._hvd_countdown.reset(passes)
        self.backward_passes_per_step = self._hvd_countdown.passes

    def job_resized(self):
        """Elastic training rebuilt the job: average over its new size."""
        self._hvd_size = basics.size()

    def load_state_dict(self, *args, **kwargs):
        self._hvd_reset()
        self._synchronized = False
        self._should_synchronize = True
        return super().load_state_dict(*args, **kwargs)

    def add_param_group(self, param_group):
        super().add_param_group(param_group)
        if "_hvd_params" not in self.__dict__:
            return
        gi = len(self.param_groups) - 1
        for j, p in enumerate(self.param_groups[-1]["params"]):
            name = self._parameter_names.get(p, f"allreduce.noname.{gi}.{j}")
            self._parameter_names[p] = name
            if p.requires_grad and p not in self._hvd_index:
                self._hvd_add_param(p, name)
                self._hvd_reset()


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set, shard_optimizer_state=False,
                         local_steps=None, **extended_options):
    """Wrap ``optimizer`` so that ``step()`` applies gradients averaged over all ranks.

    The result is an instance of a subclass of ``optimizer``'s class that shares its
    parameter groups, hyper-parameters and state (``isinstance``, ``state_dict`` and
    ``load_state_dict`` work as before); use it instead of ``optimizer``.

    Arguments (as Horovod's):
        named_parameters: ``model.named_parameters()``; names key the all-reduces and must be
            unique and cover every parameter. Default: generated names (same parameter order
            on every rank required).
        compression: ``Compression.none`` / ``fp16`` / ``bf16`` (packed by the C++ core) or a
            custom :class:`~hvdlite.torch.Compressor`.
        backward_passes_per_step: backward passes accumulated locally before the all-reduce;
            computing a gradient more often than this before ``step()`` raises
            :class:`GradientAccumulationError`.
        op: ``Average`` (default), ``Sum``, ``Min``, ``Max``, ``Product`` or ``Adasum``.
            With ``Adasum`` (at more than one rank) each rank steps on its own gradients and
            the parameters' updates are combined by Adasum, as Horovod's Adasum optimizer
            does (Note [Adasum optimizer] in :mod:`hvdlite.torch.adasum_optimizer`);
            ``groups`` and ``sparse_as_dense`` then do not apply.
        gradient_predivide_factor: with ``op=Average``, scale gradients by ``1/f`` before the
            sum and by ``f/size`` after it.
        groups: an int (split the parameters into that many groups) or a list of lists of
            parameters; each group is all-reduced together (one grouped all-reduce) once every
            member's gradient is ready.
        sparse_as_dense: all-reduce sparse gradients as dense tensors instead of all-gathering
            their indices and values.

    Beyond Horovod (see :mod:`hvdlite.torch.extended`): ``shard_optimizer_state=True``
    (ZeRO-1; ``bucket_bytes=``), ``local_steps=H`` (local SGD; ``local_sgd_warmup_steps=``,
    ``average_optimizer_state=``), and ``Compression.powersgd`` / ``topk`` /
    ``fp16(error_feedback=True)``.
    """
    check_optimizer(optimizer, torch.optim.Optimizer, SynchronizeProtocol,  # any wrapper
                    "torch.optim.Optimizer",
                    ". Keras optimizers: hvdlite.keras.DistributedOptimizer.")
    op = policy.resolve_op(op, None, "DistributedOptimizer")
    policy.check_predivide(op, gradient_predivide_factor, "DistributedOptimizer")
    check_passes(backward_passes_per_step)
    groups = policy.groups_arg(groups, num_groups)
    if compression is None:
        compression = Compression.none
    if _extended.wants_extension(compression, shard_optimizer_state, local_steps):
        return _extended.make(optimizer, named_parameters, compression,
                              backward_passes_per_step, op, gradient_predivide_factor, groups,
                              sparse_as_dense, shard_optimizer_state, local_steps,
                              none_if_global(process_set), **extended_options)
    if extended_options:
        raise TypeError(f"DistributedOptimizer() got unexpected keyword arguments "
                        f"{sorted(extended_options)} (bucket_bytes goes with "
                        f"shard_optimizer_state=True; local_sgd_warmup_steps and "
                        f"average_optimizer_state with local_steps=H)")

    process_set = process_set or global_process_set
    if op == Adasum and process_set.size() > 1:  # at one rank Horovod wraps as usual
        policy.check_adasum_ranks(op, process_set.process_set_id or 0, "DistributedOptimizer")
        dist = wrap(_DistributedAdasumOptimizer, optimizer)
        dist._hvd_adasum_setup(named_parameters, compression, backward_passes_per_step,
                               process_set)
        return dist
    dist = wrap(_DistributedOptimizer, optimizer)
    dist._hvd_setup(named_parameters, compression, backward_passes_per_step, op,
                    gradient_predivide_factor, groups, sparse_as_dense, process_set)
    return dist
