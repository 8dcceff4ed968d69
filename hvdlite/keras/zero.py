"""Sharded optimizer state (ZeRO stage 1) for the Keras ``DistributedOptimizer``:
``DistributedOptimizer(opt, shard_optimizer_state=True)``, on every backend.

Layout. The trainable variables are packed, per dtype and in the optimizer's order, into one
flat index space padded to a multiple of the number of ranks; rank r owns the r-th equal
slice. The wrapped optimizer is built on one 1-D "shard" variable per dtype (an optimizer
variable) instead of the model's variables, so its slots (momentum, Adam's moments...)
exist only for this rank's slice: about 1/size of the whole.

A step (Keras hands ``apply`` every gradient at once):
1. the flat gradient is reduce-scattered: this rank gets its slice, averaged over ranks;
2. the shard takes this rank's slice of the current variables, and the wrapped optimizer
   updates it with that gradient slice;
3. the updated shards are all-gathered and written back into the variables (then the
   variables' constraints run, as Keras' own apply does).
Reduce-scatter plus all-gather move the same bytes as one ring all-reduce.

Only updates that treat each element on its own are exact on flat slices, so options that
look at a whole variable (``clipnorm``, ``exclude_from_weight_decay``) or at all of them
(``global_clipnorm``), and optimizers known to do so (Lamb, Adafactor, Muon), are refused.

Checkpoints: the shards and their slots are optimizer variables, saved with the optimizer.
They are this rank's: a checkpoint loads back on the rank and size that saved it (each rank
saves its own file); elsewhere ``hvd.load_model`` raises.
"""

import numpy as np
from keras import ops

import hvdlite as _hvd
from hvdlite import ops as _ops
from hvdlite.exceptions import HvdliteInvalidArgumentError
from hvdlite.ops import Average, Sum

from . import policy
from .backend import bridge

_FLOATS = ("float32", "float64")
#: Optimizers whose update looks at whole variables (norms, factored moments).
UNSUPPORTED = ("Lamb", "Adafactor", "Muon", "LossScaleOptimizer")


class _Bucket:
    """One dtype's variables in a flat index space; this rank owns [begin, end)."""

    def __init__(self, dtype, indices, variables, size, rank):
        self.dtype, self.indices = dtype, indices
        self.shapes = [tuple(variables[i].shape) for i in indices]
        self.numels = [int(np.prod(s)) for s in self.shapes]
        self.numel = sum(self.numels)
        self.shard_numel = -(-self.numel // size)
        self.padded = self.shard_numel * size
        self.begin = rank * self.shard_numel
        self.end = self.begin + self.shard_numel


def check_supported(optimizer, op, what):
    name = type(optimizer).__name__
    if name in UNSUPPORTED:
        raise HvdliteInvalidArgumentError(
            f"{what}: shard_optimizer_state=True does not support {name}: its update looks at "
            f"whole variables, which a flat shard cuts through")
    for option in ("clipnorm", "global_clipnorm"):
        if getattr(optimizer, option, None):
            raise HvdliteInvalidArgumentError(
                f"{what}: shard_optimizer_state=True cannot apply {option} (a norm over whole "
                f"variables); clip the gradients before optimizer.apply instead")
    if getattr(optimizer, "_exclude_from_weight_decay", None) or \
            getattr(optimizer, "_exclude_from_weight_decay_names", None):
        raise HvdliteInvalidArgumentError(
            f"{what}: shard_optimizer_state=True cannot honour exclude_from_weight_decay "
            f"(shards mix variables)")
    if getattr(optimizer, "gradient_accumulation_steps", None) or \
            getattr(optimizer, "use_ema", False):
        raise HvdliteInvalidArgumentError(
            f"{what}: shard_optimizer_state=True does not combine with Keras' "
            f"gradient_accumulation_steps or use_ema (use backward_passes_per_step)")
    if op not in (Average, Sum):
        raise HvdliteInvalidArgumentError(f"{what}: shard_optimizer_state=True supports "
                                          f"op=Average or op=Sum")


class ShardedState:
    """The layout and collectives of one sharded optimizer."""

    def __init__(self, name, op, predivide, process_set, what):
        self.name, self.what, self.process_set = name, what, process_set
        self.reduction = policy.reduction(op, predivide, process_set)
        self.built = False

    def _set_kw(self):
        return {} if self.process_set is None else {"process_set": self.process_set}

    def shard_variables(self, optimizer, variables):
        """Make this rank's shard variables (one per dtype) for ``variables``."""
        size = policy.set_size(self.process_set)
        rank = _hvd.rank() if self.process_set is None else self.process_set.rank()
        self.rank_size = (rank, size)
        by_dtype = {}
        for i, v in enumerate(variables):
            dtype = str(v.dtype)
            if dtype not in _FLOATS:
                raise HvdliteInvalidArgumentError(
                    f"{self.what}: shard_optimizer_state=True handles float32 and float64 "
                    f"variables; {policy.variable_label(v, i)} is {dtype}")
            by_dtype.setdefault(dtype, []).append(i)
        self.buckets = [_Bucket(d, idx, variables, size, rank)
                        for d, idx in sorted(by_dtype.items())]
        self.shards = [optimizer.add_variable((b.shard_numel,), initializer="zeros",
                                              dtype=b.dtype, name=f"hvdlite_shard_{b.dtype}")
                       for b in self.buckets]
        owner = np.array([rank, size], np.int32)
        self.owner = optimizer.add_variable((2,), initializer=lambda shape, dtype: owner,
                                            dtype="int32", name="hvdlite_shard_owner")
        self.built = True
        return self.shards

    def check_owner(self, owner):
        rank, size = self.rank_size
        owner = [int(x) for x in np.asarray(owner)]
        if owner != [rank, size]:
            raise HvdliteInvalidArgumentError(
                f"{self.what}: this sharded optimizer state was saved by rank {owner[0]} of "
                f"{owner[1]}; this is rank {rank} of {size}. Sharded state loads back only on "
                f"the rank and size that saved it (each rank saves its own checkpoint)")

    def _flat(self, b, tensors):
        flat = ops.concatenate([ops.reshape(ops.cast(t, b.dtype), (-1,)) for t in tensors])
        if b.padded > b.numel:
            flat = ops.concatenate([flat, ops.zeros((b.padded - b.numel,), b.dtype)])
        return flat

    def update(self, base_apply, grads, variables, when=None):
        """One sharded step: reduce-scatter, the wrapped optimizer on the shards, all-gather."""
        for i, g in enumerate(grads):
            if g is None:
                grads[i] = ops.zeros_like(variables[i])
            else:
                grads[i] = bridge().dense_gradient(g, policy.variable_label(variables[i], i),
                                                   True, self.what)
        flats = [self._flat(b, [grads[i] for i in b.indices]) for b in self.buckets]
        op, pre, post = self.reduction
        names = [f"{self.name}.zero.grad.{b.dtype}" for b in self.buckets]
        kw, buckets = self._set_kw(), self.buckets

        built_for = self.rank_size[1]
        what = self.what

        def reduce_scatter(run, *arrays):
            if not run:
                return [np.zeros(b.shard_numel, b.dtype) for b in buckets]
            size = policy.set_size(kw.get("process_set"))
            if size != built_for:
                raise HvdliteInvalidArgumentError(
                    f"{what}: the shards were cut for {built_for} ranks but the job now has "
                    f"{size} (elastic training resized it); sharded optimizer state is not "
                    f"resharded in place: build a new optimizer (or use "
                    f"shard_optimizer_state=False with elastic training)")
            works = [_ops.reducescatter_async(a, n, op, pre, post, **kw)
                     for a, n in zip(arrays, names)]
            return [_ops.wait(w).output for w in works]

        shard_grads = bridge().host_call(reduce_scatter, flats,
                                         [((b.shard_numel,), b.dtype) for b in buckets], when)
        for b, shard in zip(buckets, self.shards):
            flat = self._flat(b, [variables[i].value for i in b.indices])
            shard.assign(flat[b.begin:b.end])
        base_apply(shard_grads, self.shards)
        gather_names = [f"{self.name}.zero.param.{b.dtype}" for b in buckets]

        def all_gather(run, *arrays):
            if not run:
                return [np.zeros(b.padded, b.dtype) for b in buckets]
            works = [_ops.allgather_async(a, n, **kw) for a, n in zip(arrays, gather_names)]
            return [_ops.wait(w).output for w in works]

        gathered = bridge().host_call(all_gather, [s.value for s in self.shards],
                                      [((b.padded,), b.dtype) for b in buckets], when)
        for b, flat in zip(buckets, gathered):
            at = 0
            for i, shape, n in zip(b.indices, b.shapes, b.numels):
                v = variables[i]
                v.assign(ops.reshape(flat[at:at + n], shape))
                if getattr(v, "constraint", None) is not None:
                    v.assign(v.constraint(v))
                at += n
