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

from hvdlite import ops as _ops
from hvdlite.algorithms import sharded_state, sharding
from hvdlite.exceptions import HvdliteInvalidArgumentError

from . import labels
from .backend import bridge


class _Bucket(sharding.BucketPlan):
    """One dtype's variables in a flat index space; this rank owns [begin, end)."""

    def __init__(self, dtype, indices, variables, size, rank):
        self.dtype, self.indices = dtype, indices
        super().__init__([variables[i].shape for i in indices], size, rank)


def _wrapped_class(optimizer):
    """The Keras optimizer class a DistributedOptimizer wraps (after the mixin in its MRO)."""
    mro = type(optimizer).__mro__
    return mro[next(i for i, c in enumerate(mro) if "_hvd_settings" in vars(c)) + 1]


def _reference_prefix(variable):
    """The start of the names Keras gives the slots it makes for ``variable``
    (``add_variable_from_reference``)."""
    if hasattr(variable, "path"):
        return variable.path.replace("/", "_")
    return str(variable.name).replace("/", "_").replace(":", "_")


class ShardedState:
    """The layout and collectives of one sharded optimizer."""

    def __init__(self, name, op, predivide, process_set, what):
        self.name, self.what, self.process_set = name, what, process_set
        self.reduction = labels.reduction(op, predivide, process_set)
        self.built = False

    def _set_kw(self):
        return {} if self.process_set is None else {"process_set": self.process_set}

    def shard_variables(self, optimizer, variables):
        """Make this rank's shard variables (one per dtype) for ``variables``."""
        self.rank_size = rank, size = sharding.place(self.process_set)
        dtypes = [str(v.dtype) for v in variables]
        for i, (v, dtype) in enumerate(zip(variables, dtypes)):
            if dtype not in ("float32", "float64"):
                raise HvdliteInvalidArgumentError(
                    f"{self.what}: shard_optimizer_state=True handles float32 and float64 "
                    f"variables; {labels.variable_label(v, i)} is {dtype}")
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
        prefixes = [(k, _reference_prefix(s)) for k, s in enumerate(self.shards)]
        for v in optimizer.variables[self.first_slot:]:
            found = [(k, v.name[len(p) + 1:]) for k, p in prefixes
                     if v.name.startswith(p + "_")]
            if len(found) != 1 or tuple(v.shape) != (self.buckets[found[0][0]].shard_numel,):
                raise HvdliteInvalidArgumentError(
                    f"{self.what}: shard_optimizer_state=True: the wrapped "
                    f"{type(optimizer).__name__} made variable {v.name!r} of shape "
                    f"{tuple(v.shape)}, which is not a per-element slot of a shard; this "
                    f"optimizer cannot be sharded")
            self.slots[found[0]] = v
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
        plain_class = _wrapped_class(optimizer)
        plain = plain_class.from_config(optimizer.get_config())
        before = len(plain.variables)
        plain.build(self.model_variables)
        slot_of = {f"{_reference_prefix(self.model_variables[i])}_{key[1]}": (key, pos)
                   for key in self.slots for pos, i in enumerate(self.buckets[key[0]].indices)}
        layout = []
        for j, v in enumerate(plain.variables):
            if j < before:
                layout.append(("own", j))
            elif v.name in slot_of:
                layout.append(("slot",) + slot_of[v.name])
            else:
                raise HvdliteInvalidArgumentError(
                    f"{self.what}: cannot consolidate the sharded state: the unsharded "
                    f"{plain_class.__name__} has variable {v.name!r}, which matches no slot "
                    f"of the shards")
        if before != self.prebuilt:
            raise HvdliteInvalidArgumentError(
                f"{self.what}: cannot consolidate the sharded state: the unsharded "
                f"{plain_class.__name__} has {before} variables before build, this one "
                f"{self.prebuilt}")
        self.layout = layout
        return layout

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
        layout = self._unsharded_layout(optimizer)
        values = list(values)
        if len(values) != len(layout):
            raise HvdliteInvalidArgumentError(
                f"{self.what}: load_consolidated_variables: got {len(values)} values; the "
                f"unsharded {_wrapped_class(optimizer).__name__} on these variables has "
                f"{len(layout)}")
        pieces = {key: [np.zeros(n) for n in self.buckets[key[0]].numels] for key in self.slots}
        for entry, value in zip(layout, map(np.asarray, values)):
            if entry[0] == "own":
                optimizer.variables[entry[1]].assign(value)
                continue
            _, key, pos = entry
            i = self.buckets[key[0]].indices[pos]
            variable = self.model_variables[i]
            if tuple(value.shape) != tuple(variable.shape):
                raise HvdliteInvalidArgumentError(
                    f"{self.what}: load_consolidated_variables: the {key[1]} of "
                    f"{labels.variable_label(variable, i)} has shape {tuple(value.shape)}; "
                    f"the variable has {tuple(variable.shape)}")
            pieces[key][pos] = value
        for (k, suffix), values_of in pieces.items():
            b = self.buckets[k]
            self.slots[k, suffix].assign(b.fill_shard(np.zeros(b.shard_numel, b.dtype),
                                                      values_of))

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
                grads[i] = bridge().dense_gradient(g, labels.variable_label(variables[i], i),
                                                   True, self.what)
        flats = [self._flat(b, [grads[i] for i in b.indices]) for b in self.buckets]
        op, pre, post = self.reduction
        names = [f"{self.name}.zero.grad.{b.dtype}" for b in self.buckets]
        kw, buckets, built_for, what = self._set_kw(), self.buckets, self.rank_size[1], self.what

        def reduce_scatter(run, *arrays):
            if not run:
                return [np.zeros(b.shard_numel, b.dtype) for b in buckets]
            size = labels.set_size(kw.get("process_set"))
            if size != built_for:
                raise HvdliteInvalidArgumentError(
                    f"{what}: the shards were cut for {built_for} ranks but the job now has "
                    f"{size} (elastic training resized it) and were not resharded: call "
                    f"optimizer.reshard(values) with a consolidate_variables() result "
                    f"(hvd.elastic.KerasState does) and trace the train function again")
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
            for i, shape, piece in zip(b.indices, b.shapes, b.split(flat)):
                v = variables[i]
                v.assign(ops.reshape(piece, shape))
                if getattr(v, "constraint", None) is not None:
                    v.assign(v.constraint(v))
