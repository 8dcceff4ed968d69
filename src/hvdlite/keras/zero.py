"""Sharded optimizer state (ZeRO stage 1) for the Keras ``DistributedOptimizer``:
``DistributedOptimizer(opt, shard_optimizer_state=True)``, on every backend.

The layout, the step and which optimizers and options are accepted are
:mod:`hvdlite.algorithms.sharding`'s, shared with torch. Here one bucket holds the trainable
variables of one dtype, in the optimizer's order; the shards are optimizer variables, on
which the wrapped optimizer builds its slots. Keras hands ``apply`` every gradient at once;
after the update the variables' constraints run, as Keras' own apply does.

Checkpoints: the shards and their slots are saved with the optimizer and load back on the
rank and size that saved them (each rank saves its own file); elsewhere ``hvd.load_model``
raises. ``optimizer.consolidate_variables(to=0)`` gathers the values the unsharded
optimizer's ``variables`` would hold (in their order: a plain optimizer built on the model
assigns them one by one), and ``load_consolidated_variables`` of a sharded optimizer cuts
them into its shards at any size, as elastic training's ``reshard`` does after a resize.
"""

import numpy as np
from keras import ops

from hvdlite.algorithms import sharded_state, sharding
from hvdlite.policy import reduction, variable_label
from hvdlite.algorithms.shard_exchange import ShardExchange
from hvdlite.exceptions import HvdliteInvalidArgumentError
from hvdlite.optimizer_protocol import wrapped_class

from .backend import bridge


class _Bucket(sharding.BucketPlan):
    """One dtype's variables in a flat index space; this rank owns [begin, end)."""

    def __init__(self, dtype, indices, variables, size, rank):
        self.dtype, self.indices = dtype, indices
        super().__init__([variables[i].shape for i in indices], size, rank)


class ShardedState:
    """The layout and collectives of one sharded optimizer."""

    def __init__(self, name, op, predivide, process_set, what):
        self.name, self.what, self.process_set = name, what, process_set
        self.reduction = reduction(op, predivide, process_set)
        self.built = False

    def shard_variables(self, optimizer, variables):
        """Make this rank's shard variables (one per dtype) for ``variables``."""
        self.rank_size = rank, size = sharding.place(self.process_set)
        dtypes = [str(v.dtype) for v in variables]
        for i, (v, dtype) in enumerate(zip(variables, dtypes)):
            if dtype not in ("float32", "float64"):
                raise HvdliteInvalidArgumentError(
                    f"{self.what}: shard_optimizer_state=True handles float32 and float64 "
                    f"variables; {variable_label(v, i)} is {dtype}")
        self.buckets = [_Bucket(dtypes[idx[0]], idx, variables, size, rank)
                        for idx in sharding.plan_buckets(dtypes, None)]
        # The wrapped optimizer's own variables made before build (iterations, learning
        # rate): everything after them is cut for this size.
        self.prebuilt = len(optimizer.variables)
        self.shards = [optimizer.add_variable((b.shard_numel,), initializer="zeros",
                                              dtype=b.dtype, name=f"hvdlite_shard_{b.dtype}")
                       for b in self.buckets]
        owner = np.array([rank, size], np.int32)
        self.owner = optimizer.add_variable((2,), initializer=lambda shape, dtype: owner,
                                            dtype="int32", name="hvdlite_shard_owner")
        self.built = True
        self.first_slot = len(optimizer.variables)
        return self.shards

    def note_slots(self, optimizer, variables):
        """After the wrapped optimizer built its slots on the shards: name each slot by its
        bucket and its suffix (Keras names a slot "<reference path>_<suffix>")."""
        self.model_variables = list(variables)
        self.slots = {}     # (bucket index, suffix) -> slot variable
        prefixes = [sharded_state.reference_prefix(s) for s in self.shards]
        for v in optimizer.variables[self.first_slot:]:
            key = sharded_state.slot_key(v.name, prefixes)
            if key is None or tuple(v.shape) != (self.buckets[key[0]].shard_numel,):
                raise HvdliteInvalidArgumentError(
                    f"{self.what}: shard_optimizer_state=True: the wrapped "
                    f"{type(optimizer).__name__} made variable {v.name!r} of shape "
                    f"{tuple(v.shape)}, which is not a per-element slot of a shard; this "
                    f"optimizer cannot be sharded")
            self.slots[key] = v
        self.slot_end = len(optimizer.variables)
        self.layout = None

    def needs_reshard(self):
        """Whether the shards were cut for another rank or size (elastic training resized
        the job)."""
        return self.built and sharding.place(self.process_set) != self.rank_size

    # -- the unsharded optimizer's variables ----------------------------------------------

    def _unsharded_layout(self, optimizer):
        """Where each variable of the unsharded optimizer (the wrapped class built on the
        model's variables, in its order) lives here: ("own", index in optimizer.variables) or
        ("slot", (bucket index, suffix), position in the bucket). Found once, from a plain
        optimizer built on the model's variables (then dropped)."""
        if self.layout is not None:
            return self.layout
        plain_class = wrapped_class(type(optimizer), "_hvd_settings")
        plain = plain_class.from_config(optimizer.get_config())
        before = len(plain.variables)
        plain.build(self.model_variables)
        self.layout = sharded_state.unsharded_layout(
            [v.name for v in plain.variables], before, self.prebuilt, self.slots,
            [[sharded_state.reference_prefix(self.model_variables[i]) for i in b.indices]
             for b in self.buckets], f"{self.what}: cannot consolidate the sharded state: "
            f"the unsharded {plain_class.__name__}")
        return self.layout

    def consolidate(self, optimizer, to=0):
        """The values the unsharded optimizer's ``variables`` would hold, in their order (a
        plain optimizer built on the model assigns them one by one), gathered from every
        rank's shards: numpy arrays on rank ``to`` (every rank when None), None elsewhere."""
        pieces = sharded_state.gather_slots(
            self.buckets, {key: np.ascontiguousarray(ops.convert_to_numpy(self.slots[key].value))
                           for key in sorted(self.slots)},
            f"{self.name}.zero.state", self.process_set, to, self.rank_size[0],
            lambda r: np.asarray(r.output))
        if pieces is None:
            return None
        own = optimizer.variables
        return [np.array(ops.convert_to_numpy(own[e[1]].value)) if e[0] == "own" else
                pieces[e[1]][e[2]].copy() for e in self._unsharded_layout(optimizer)]

    def load_consolidated(self, optimizer, values):
        """Cut ``values`` (a ``consolidate`` result, taken at any size) into this rank's
        shards and assign them; None: the slots' initial state (zeros). Local."""
        if values is None:
            for slot in self.slots.values():
                slot.assign(ops.zeros(slot.shape, slot.dtype))
            return
        own, shards = sharded_state.cut_consolidated(
            self._unsharded_layout(optimizer), list(values), self.buckets,
            [b.dtype for b in self.buckets], list(self.slots),
            [[variable_label(self.model_variables[i], i) for i in b.indices]
             for b in self.buckets], f"{self.what}: load_consolidated_variables",
            f"the unsharded {wrapped_class(type(optimizer), '_hvd_settings').__name__} on "
            f"these variables")
        for j, value in own.items():
            optimizer.variables[j].assign(value)
        for key, shard in shards.items():
            self.slots[key].assign(shard)

    def check_owner(self, owner):
        sharding.check_owner(
            [int(x) for x in np.asarray(owner)], self.rank_size, self.what,
            "Sharded state loads back only on the rank and size that saved it (each rank "
            "saves its own checkpoint)")

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
                grads[i] = bridge().dense_gradient(g, variable_label(variables[i], i),
                                                   True, self.what)
        flats = [self._flat(b, [grads[i] for i in b.indices]) for b in self.buckets]
        exchange = ShardExchange(self.buckets, [b.dtype for b in self.buckets], self.name,
                                 self.reduction, self.process_set, self.rank_size[1], self.what)
        shard_grads = bridge().host_call(exchange.reduce_scatter, flats,
                                         exchange.shard_specs(), when)
        for b, shard in zip(self.buckets, self.shards):
            flat = self._flat(b, [variables[i].value for i in b.indices])
            shard.assign(flat[b.begin:b.end])
        base_apply(shard_grads, self.shards)
        gathered = bridge().host_call(exchange.all_gather, [s.value for s in self.shards],
                                      exchange.bucket_specs(), when)
        for b, flat in zip(self.buckets, gathered):
            for i, shape, piece in zip(b.indices, b.shapes, b.split(flat)):
                v = variables[i]
                v.assign(ops.reshape(piece, shape))
                if getattr(v, "constraint", None) is not None:
                    v.assign(v.constraint(v))
