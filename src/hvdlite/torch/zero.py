"""Sharded optimizer state (ZeRO stage 1): ``DistributedOptimizer(shard_optimizer_state=True)``.

The layout, the step and which optimizers are accepted are
:mod:`hvdlite.algorithms.sharding`'s, shared with Keras. Here the buckets hold each parameter
group's trainable parameters per dtype, in reverse order (the order backward produces their
gradients), about ``bucket_bytes`` each; a bucket's reduce-scatter starts from the gradient
hooks as soon as backward has produced all of its gradients (``backward_passes_per_step``
times), while backward goes on. Clipping by the global norm goes through
:meth:`ShardedOptimizer.clip_grad_norm_`, which all-reduces the shards' norms.

Checkpoints. ``state_dict()`` is this rank's shard (it loads only at the same size and rank);
``consolidate_state_dict(to=0)`` returns, on rank 0, the state dict the unsharded optimizer
would have (parameter-shaped tensors, the original parameter indices), which a plain
optimizer loads as is and ``load_state_dict`` of a sharded optimizer reshards at any size.
"""

from collections import defaultdict
import weakref

import torch

from hvdlite import ops as _ops
from hvdlite.algorithms import clipping, shard_exchange, sharded_state, sharding
from hvdlite.algorithms.accumulation import Countdown
from hvdlite.convert.torch_tensors import from_core
from hvdlite.exceptions import HvdliteInvalidArgumentError

from ._wrap import (SynchronizeProtocol, flat_view, refuse_extra_pass, remove_hooks,
                    require_contiguous, watch_gradient, wrap)

DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024
_STATE_KEY = "hvdlite_zero"


class _Piece:
    """A parameter and its gradient's place in its bucket's flat gradient."""
    __slots__ = ("param", "name", "grad_view")

    def __init__(self, param, name, grad_view):
        self.param, self.name, self.grad_view = param, name, grad_view.view_as(param)

    def collect(self):
        """Bring a .grad that is not the bucket's view (replaced, e.g. by
        ``model.zero_grad(set_to_none=True)``) into the bucket; no .grad: zeros."""
        g = self.param.grad
        with torch.no_grad():
            if g is None:
                self.grad_view.zero_()
            elif g.data_ptr() != self.grad_view.data_ptr():     # else autograd added into it
                self.grad_view.copy_(g)


class _Bucket(sharding.BucketPlan):
    def __init__(self, index, group, params, names, size, rank):
        super().__init__([p.shape for p in params], size, rank)
        self.index, self.group = index, group
        dtype = params[0].dtype
        # The local gradients; after the reduce-scatter, [begin, end) holds the reduced slice
        # (so after synchronize() a parameter's .grad is not a meaningful gradient: use
        # clip_grad_norm_ of the optimizer, which works on the reduced slices).
        # Gradients accumulate straight into the bucket (as DDP's gradient_as_bucket_view):
        # no second full-size copy of the gradients.
        self.flat_grad = torch.zeros(self.padded, dtype=dtype)
        self.pieces = [_Piece(p, names[id(p)], view)
                       for p, view in zip(params, self.split(self.flat_grad))]
        self.shard = torch.zeros(self.shard_numel, dtype=dtype, requires_grad=True)
        self.handle = None      # the reduce-scatter in flight


def _group_options(group):
    return {k: v for k, v in group.items() if k != "params"}


class ShardedOptimizer(SynchronizeProtocol):
    """Methods placed in front of the wrapped optimizer's class (see the module docstring)."""

    _hvd_sharded = True

    def _zero_setup(self, names, backward_passes_per_step, op, prescale, postscale,
                    bucket_bytes, process_set=None):
        # Shards are cut over the ranks of process_set (None: all ranks).
        self._zero_set_kw = {} if process_set is None else {"process_set": process_set}
        self._zero_prefix = sharding.instance_prefix(process_set)

        self.backward_passes_per_step = int(backward_passes_per_step)
        self._zero_op, self._zero_prescale, self._zero_postscale = op, prescale, postscale
        # The model's parameter groups as the user built them: the consolidated state dict
        # numbers parameters in this order, as the unsharded optimizer's state_dict does.
        self._zero_model_groups = [list(g["params"]) for g in self.param_groups]
        previous_state = super().state_dict() if len(self.state) else None
        self._zero_chunks = []          # (parameter group index, the bucket's parameters)
        for gi, group in enumerate(self.param_groups):
            trainable = require_contiguous(
                [p for p in group["params"] if p.requires_grad], names,
                "DistributedOptimizer(shard_optimizer_state=True)")[::-1]
            self._zero_chunks += [(gi, [trainable[i] for i in chunk]) for chunk in
                                  sharding.plan_buckets([p.dtype for p in trainable], [
                                      p.numel() * p.element_size() for p in trainable],
                                      bucket_bytes)]
        self._zero_names = names
        self._zero_layout([_group_options(g) for g in self.param_groups])
        # The hooks live on the parameters: take them off when this optimizer goes away.
        self_ref = weakref.ref(self)
        self._zero_hooks = []
        self._zero_grad_accs = {
            p: watch_gradient(p, self_ref, p, "_zero_before_accumulate", "_zero_grad_ready",
                              self._zero_hooks) for p in self._zero_bucket_of}
        weakref.finalize(self, remove_hooks, self._zero_hooks)
        self._init_protocol()
        if previous_state is not None:
            self.load_state_dict(previous_state)

    def _zero_place(self):
        """(rank, size) of this rank in the ranks the shards are cut over, now."""
        return sharding.place(self._zero_set_kw.get("process_set"))

    def needs_reshard(self):
        """Whether the shards were cut for another rank or size than this rank has now (after
        elastic training changed the job)."""
        return self._zero_place() != (self._zero_rank, self._zero_size)

    def _zero_layout(self, group_options):
        """Cut the buckets into this rank's slices for the current size; the wrapped
        optimizer gets fresh shards with no state (the caller loads it)."""
        self._zero_rank, self._zero_size = self._zero_place()
        self._zero_buckets, self._zero_bucket_of = [], {}
        shards = [[] for _ in group_options]
        for gi, chunk in self._zero_chunks:
            b = _Bucket(len(self._zero_buckets), gi, chunk, self._zero_names, self._zero_size,
                        self._zero_rank)
            self._zero_buckets.append(b)
            for p in chunk:
                self._zero_bucket_of[p] = b
            shards[gi].append(b.shard)
        self.param_groups = [dict(opts, params=s) for opts, s in zip(group_options, shards)]
        self.state = defaultdict(dict)
        self._zero_attach_grads(zero=False)
        self._zero_reset()

    def reshard(self, full_state_dict):
        """Re-cut the shards for the job's current size and load ``full_state_dict`` (a
        ``consolidate_state_dict`` result) into them. Local: no collective.

        Elastic training calls this when the job's size changed (``TorchState``); the
        gradients start again from zero.
        """
        sharding.check_reshardable(self._zero_set_kw.get("process_set"), "DistributedOptimizer")
        self._zero_layout([_group_options(g) for g in self.param_groups])
        self._zero_attach_grads(zero=True)
        self.load_state_dict(full_state_dict)

    # -- gradients ------------------------------------------------------------------------

    def _zero_attach_grads(self, zero):
        """Point every parameter's .grad at its place in its bucket (zeroed, or keeping the
        gradient it has)."""
        for b in self._zero_buckets:
            if zero:
                b.flat_grad.zero_()
            for pc in b.pieces:
                if not zero:
                    pc.collect()
                pc.param.grad = pc.grad_view

    def _zero_reset(self, passes=None):
        self._zero_countdown = Countdown(
            self.backward_passes_per_step if passes is None else passes, self._zero_bucket_of)
        self.backward_passes_per_step = self._zero_countdown.passes
        for b in self._zero_buckets:
            self._zero_countdown.group(pc.param for pc in b.pieces)
            b.handle = None

    def _zero_before_accumulate(self, p):
        # Refuse an extra backward pass before it adds into a bucket being reduce-scattered.
        refuse_extra_pass(self._zero_countdown, p, self._zero_grad_accs[p],
                          self._zero_names[id(p)])

    def _zero_grad_ready(self, p):
        if self._zero_countdown.arrive(p, self._zero_names[id(p)]):     # the bucket is complete
            self._zero_start(self._zero_bucket_of[p])

    def _zero_start(self, b):
        """Reduce-scatter the bucket's flat gradient (zeros for parameters without one)."""
        for pc in b.pieces:
            pc.collect()
        b.handle = _ops.reducescatter_async(b.flat_grad, f"{self._zero_prefix}.grad.{b.index}",
                                            self._zero_op, self._zero_prescale,
                                            self._zero_postscale, **self._zero_set_kw)

    def _reduce_gradients(self):
        for b in self._zero_buckets:
            if b.handle is None:
                self._zero_start(b)
        def take(i, r):
            # This rank's reduced slice goes where its local gradient was (no longer
            # needed): the shard's gradient costs no memory of its own.
            b = self._zero_buckets[i]
            b.shard.grad = b.flat_grad[b.begin:b.end].copy_(from_core(r, torch.device("cpu")))
        try:
            shard_exchange.wait_each([b.handle for b in self._zero_buckets], take)
        finally:
            self._zero_reset()

    def clip_grad_norm_(self, max_norm, norm_type=2.0, error_if_nonfinite=False):
        """``torch.nn.utils.clip_grad_norm_`` over every rank's shard: the global norm.

        Call it between ``synchronize()`` and ``step()`` (under ``skip_synchronize()``), where
        the unsharded code calls ``clip_grad_norm_(model.parameters(), ...)``. Returns the
        total norm, the same on every rank.
        """
        if not self._synchronized:
            raise HvdliteInvalidArgumentError(
                "clip_grad_norm_: call optimizer.synchronize() first (the shards' gradients "
                "are reduced there), then step() under optimizer.skip_synchronize()")
        grads = [b.shard.grad for b in self._zero_buckets]
        total = clipping.global_norm([g.detach().double().numpy() for g in grads], norm_type,
                                     "zero.clip", self._zero_set_kw.get("process_set"))
        coef = clipping.clip_coefficient(max_norm, total, norm_type, error_if_nonfinite)
        with torch.no_grad():
            for g in grads:
                g.mul_(coef)
        return torch.tensor(total)

    # -- the update -------------------------------------------------------------------------

    def _apply_step(self, closure=None):
        if closure is not None:
            raise HvdliteInvalidArgumentError(
                "step(closure): closures are not supported with shard_optimizer_state=True "
                "(the loss would be re-evaluated with parameters only this rank's shard of "
                "which has been updated)")
        with torch.no_grad():
            for b in self._zero_buckets:
                # The parameters are the truth (broadcast_parameters, load_state_dict of the
                # model): take this rank's slice of them afresh every step.
                b.fill_shard(b.shard.zero_(), [pc.param for pc in b.pieces])
        result = self._base_step()
        self._zero_gather_params()
        return result

    def _zero_gather_params(self):
        """All-gather the updated shards into the parameters, two buckets in flight: one
        transfers while the other is copied out, and only two full buckets exist at once."""
        buckets = self._zero_buckets

        def start(i):
            return _ops.allgather_async(buckets[i].shard.detach(),
                                        f"{self._zero_prefix}.param.{i}", **self._zero_set_kw)

        def write(i, r):
            with torch.no_grad():
                for pc, part in zip(buckets[i].pieces,
                                    buckets[i].split(from_core(r, torch.device("cpu")))):
                    flat_view(pc.param).copy_(part)
        shard_exchange.pipelined(len(buckets), start, write)

    def zero_grad(self, set_to_none=True):
        """Zero the gradients. They stay views of their buckets whatever ``set_to_none``
        says: the bucket is their memory, so setting them to None would free nothing."""
        del set_to_none
        self._zero_countdown.refuse_zero_grad(
            any(b.handle is not None for b in self._zero_buckets))
        self._zero_attach_grads(zero=True)      # a .grad replaced meanwhile is let go
        for b in self._zero_buckets:
            b.shard.grad = None

    def set_backward_passes_per_step(self, passes):
        self._zero_reset(passes)

    def add_param_group(self, param_group):
        if "_zero_buckets" not in self.__dict__:
            return super().add_param_group(param_group)
        raise HvdliteInvalidArgumentError(
            "add_param_group is not supported with shard_optimizer_state=True: give every "
            "parameter group to the optimizer before wrapping it")

    # -- checkpoints ------------------------------------------------------------------------

    def state_dict(self):
        """This rank's shard of the state (loads back only at the same size and rank).

        For a checkpoint that loads anywhere, use :meth:`consolidate_state_dict`.
        """
        sd = super().state_dict()
        sd[_STATE_KEY] = {"rank": self._zero_rank, "size": self._zero_size,
                          "buckets": [b.numel for b in self._zero_buckets]}
        return sd

    def consolidate_state_dict(self, to=0):
        """The unsharded optimizer's state dict, gathered from every rank's shard.

        A collective: every rank must call it. Returns the dict on rank ``to`` (on every
        rank when ``to`` is None) and None elsewhere. Tensors have their parameters' shapes
        and parameters are numbered as in the optimizer that was wrapped, so a plain
        ``torch.optim`` optimizer loads it, and so does a sharded one at any size.
        """
        return self._zero_consolidate(to, None)

    def _zero_consolidate(self, to, keys_of):
        """consolidate_state_dict; ``keys_of`` (per bucket: [(key, dtype of a per-element
        state, or None)]) names root's state where given: a rank without it (fresh, or added
        by elastic training) then sends zeros for it, which only it would have received."""
        if keys_of is None:
            keys_of = [self._zero_keys(b) for b in self._zero_buckets]
        slots = {(b.index, k): self.state.get(b.shard, {}).get(k, torch.zeros(
                     b.shard_numel, dtype=dtype)).detach().contiguous()
                 for b, keys in zip(self._zero_buckets, keys_of) for k, dtype in keys
                 if dtype is not None}
        pieces = sharded_state.gather_slots(
            self._zero_buckets, slots, f"{self._zero_prefix}.state",
            self._zero_set_kw.get("process_set"), to, self._zero_rank,
            lambda r: from_core(r, torch.device("cpu")))
        if pieces is None:
            return None
        by_param = {}
        for b, keys in zip(self._zero_buckets, keys_of):
            st = self.state.get(b.shard, {})
            for j, pc in enumerate(b.pieces):
                if keys:
                    by_param[id(pc.param)] = {k: _copy(st[k] if dtype is None else
                                                       pieces[b.index, k][j]) for k, dtype in keys}
        return sharded_state.number_state(by_param, self._zero_model_groups,
                                          [_group_options(g) for g in self.param_groups])

    def load_state_dict(self, state_dict):
        """Load this rank's own ``state_dict()``, or a consolidated one (resharded here)."""
        if "_zero_buckets" not in self.__dict__:
            return super().load_state_dict(state_dict)
        saved = state_dict.get(_STATE_KEY)
        if saved is not None:
            sharding.check_owner(
                (saved.get("rank"), saved.get("size"), saved.get("buckets")),
                (self._zero_rank, self._zero_size, [b.numel for b in self._zero_buckets]),
                "load_state_dict", "To resume at another size or layout, save "
                "optimizer.consolidate_state_dict() instead")
            state_dict = {k: v for k, v in state_dict.items() if k != _STATE_KEY}
        else:
            state_dict = self._zero_reshard(state_dict)
        super().load_state_dict(state_dict)
        self._zero_reset()
        self._synchronized = False

    # The protocol of elastic training (hvdlite.elastic.optimizer_state), with reshard and
    # needs_reshard above: the whole state is the consolidated state dict.
    def holds_shards(self):
        return True

    def consolidated(self):
        return self.consolidate_state_dict(to=None)

    load_consolidated = load_state_dict

    def _zero_reshard(self, full):
        """The consolidated (unsharded) state dict ``full`` cut to this rank's shards."""
        param_state = sharded_state.state_by_param(full, self._zero_model_groups,
                                                   "load_state_dict")
        cut = {b.index: sharded_state.shard_state(
                   b, [pc.name for pc in b.pieces],
                   [param_state.get(id(pc.param)) for pc in b.pieces], _zeros, _copy,
                   "load_state_dict") for b in self._zero_buckets}
        state = {i: st for i, st in cut.items() if st is not None}
        # torch numbers the shards by their position in param_groups: bucket order.
        index_of = {id(b.shard): b.index for b in self._zero_buckets}
        shard_groups = [dict(_group_options(g), params=[index_of[id(s)] for s in mine["params"]])
                        for g, mine in zip(full["param_groups"], self.param_groups)]
        return {"state": state, "param_groups": shard_groups}

    def _zero_keys(self, b):
        """[(key, dtype if the state is per element, shaped as the shard, else None)] of
        bucket ``b``'s state."""
        return [(k, v.dtype if torch.is_tensor(v) and v.shape == b.shard.shape else None)
                for k, v in self.state.get(b.shard, {}).items()]

    def _broadcast_state(self, root_rank):
        """``broadcast_optimizer_state`` for a sharded optimizer: root's whole state, resharded
        (:func:`hvdlite.algorithms.sharded_state.broadcast_state`)."""
        sharded_state.broadcast_state(
            self._zero_rank, root_rank, lambda: [self._zero_keys(b) for b in self._zero_buckets],
            self._zero_consolidate, self.load_state_dict)


def _copy(value):
    return value.clone() if torch.is_tensor(value) else value


def _zeros(numel, like):
    return torch.zeros(numel, dtype=like.dtype)


def make_sharded(optimizer, names, backward_passes_per_step, op, prescale, postscale,
                 bucket_bytes=DEFAULT_BUCKET_BYTES, process_set=None):
    """The sharded form of ``optimizer`` (called by ``DistributedOptimizer``)."""
    sharding.check_shardable(optimizer, "DistributedOptimizer")
    opt = wrap(ShardedOptimizer, optimizer)
    opt._zero_setup(names, backward_passes_per_step, op, prescale, postscale, int(bucket_bytes),
                    process_set)
    return opt
