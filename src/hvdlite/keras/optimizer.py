"""``DistributedOptimizer`` and ``load_model`` for Keras 3, on every backend.

Keras 3's trainers hand each step's gradients to ``optimizer.apply(grads, variables)``:
inside a ``tf.function`` on TensorFlow, eagerly on torch, and inside the jitted stateless
step (through ``stateless_apply``) on JAX. ``DistributedOptimizer`` returns an instance of
a subclass of your optimizer's class (same class name and module, so saved models load
without hvdlite) whose ``apply`` all-reduces the gradients, all in ONE grouped request
named ``<name>.<index>``, before the usual update. How the backend's tensors reach the
core is the bridge's business (src/hvdlite/keras/bridges/).

``backward_passes_per_step=N`` (Horovod's local gradient aggregation): every call adds the
gradients to accumulators (optimizer variables, so they live in JAX's stateless state and
in checkpoints); every N-th call all-reduces the sums (divided by N with
``average_aggregated_gradients``), applies them and resets. The other calls only advance
``iterations``, as in Horovod.
"""

import operator
import warnings

import numpy as np

import keras
from keras import ops

from hvdlite.exceptions import HvdliteInvalidArgumentError
from hvdlite.keras_archive import compiled_optimizer_class_name
from hvdlite.optimizer_protocol import check_optimizer

from hvdlite.algorithms import sharding
from hvdlite.algorithms.accumulation import check_passes
from hvdlite.algorithms.compression import is_stateful
from hvdlite.ops import Average
from hvdlite import policy
from hvdlite.policy import local_gradients
from hvdlite.policy.options import check_combination, check_local_variables
from hvdlite.process_sets import set_size

from .backend import bridge
from .local_sgd import LocalSGDState
from .stateful_compression import CompressionState
from .zero import ShardedState


class _HvdSettings:
    """Per-optimizer settings; a plain object so Keras does not track it."""

    def __init__(self, name, compression=None, sparse_as_dense=False, op=Average,
                 gradient_predivide_factor=1.0, backward_passes_per_step=1,
                 average_aggregated_gradients=False, process_set=None,
                 scale_local_gradients=True, shard_optimizer_state=False, local_steps=None,
                 local_sgd_warmup_steps=0, average_optimizer_state=False):
        self.name = name
        self.process_set = process_set
        self.scale_local_gradients = bool(scale_local_gradients)
        self.local_variables = {}   # id -> variable whose gradient stays local
        self.what = f"DistributedOptimizer({name})"
        self.sparse_as_dense = bool(sparse_as_dense)
        self.backward_passes_per_step = check_passes(backward_passes_per_step, self.what)
        self.average_aggregated_gradients = bool(average_aggregated_gradients)
        self.op = op = policy.resolve_op(op, None, self.what)
        predivide = float(gradient_predivide_factor)
        policy.check_predivide(op, predivide, self.what)
        check_combination(self.what, op, compression, shard_optimizer_state, local_steps,
                          local_sgd_warmup_steps, average_optimizer_state, predivide)
        self.compression_state = self.sharded = self.local_sgd = None
        if is_stateful(compression):
            self.compression_state = CompressionState(name, compression, op, predivide,
                                                      process_set, self.what)
            self.reduce_all = self.compression_state.reduce
        else:
            self.reduce_all = bridge().gradient_reducer(
                name, op, predivide, bridge().Compression.none if compression is None
                else compression, self.sparse_as_dense, process_set, self.what)
        if shard_optimizer_state:
            self.sharded = ShardedState(name, op, predivide, process_set, self.what)
        if local_steps is not None:
            self.local_sgd = LocalSGDState(name, local_steps, local_sgd_warmup_steps,
                                           average_optimizer_state, process_set, self.what)

    def adds_variables(self):
        """Whether the optimizer gets variables of hvdlite's (saved with it)."""
        return self.backward_passes_per_step > 1 or any(
            x is not None for x in (self.compression_state, self.sharded, self.local_sgd))

    def reduce(self, grads, variables, when=None):
        """All-reduce ``grads`` except those of local variables, which stay local (divided
        by the number of ranks with ``scale_local_gradients``, as Horovod)."""
        if not self.local_variables:
            return self.reduce_all(grads, variables, when=when)
        return local_gradients.reduce_except_local(
            lambda shared, their_variables: self.reduce_all(shared, their_variables, when=when),
            grads, variables, [id(v) in self.local_variables for v in variables],
            self.scale_local_gradients, set_size(self.process_set), operator.truediv)


class _DistributedOptimizer:
    """Mixed in before the wrapped optimizer's class (see ``DistributedOptimizer``)."""

    _hvd = None
    _hvd_accumulators = None   # one per trainable variable, in build order
    _hvd_passes = None         # calls since the last all-reduce

    def _hvd_settings(self):
        if self._hvd is None:  # e.g. made by from_config on the dynamic class
            self._hvd = _HvdSettings("Distributed" + type(self).__name__)
        return self._hvd

    @property
    def hvdlite_reducer(self):
        """The stateful compression's reducer (None for plain all-reduce)."""
        state = self._hvd_settings().compression_state
        return None if state is None else state.reducer

    def register_local_var(self, var):
        """Keep ``var``'s gradient local: it is not all-reduced (Horovod's API)."""
        settings = self._hvd_settings()
        check_local_variables(settings.what, settings.sharded is not None,
                              settings.local_sgd is not None,
                              settings.compression_state is not None)
        settings.local_variables[id(var)] = var

    def build(self, variables):
        settings = self._hvd_settings()
        variables = list(variables)
        if settings.sharded is None:
            super().build(variables)
        else:
            # The wrapped optimizer's slots are built for this rank's shards only; the
            # model's variables stay _trainable_variables (Keras' JAX trainer maps them).
            super().build(settings.sharded.shard_variables(self, variables))
            settings.sharded.note_slots(self, variables)
            # (object.__setattr__: Keras' tracker would add them to the optimizer's variables)
            object.__setattr__(self, "_trainable_variables", variables[:])
        self._hvd_build_state(settings, variables)

    def _hvd_build_state(self, settings, variables):
        """hvdlite's own variables for ``variables`` (those that exist already are kept)."""
        self._hvd_index = {self._var_key(v): i for i, v in enumerate(variables)}
        if settings.compression_state is not None:
            settings.compression_state.build(self, variables)
        if settings.local_sgd is not None:
            settings.local_sgd.build(self)
        self._hvd_make_accumulators(variables)

    def _hvd_make_accumulators(self, variables):
        if self._hvd_settings().backward_passes_per_step > 1 and \
                self._hvd_accumulators is None:
            self._hvd_accumulators = [
                self.add_variable_from_reference(v, name="hvdlite_grad_accumulator")
                for v in variables]
            self._hvd_passes = self.add_variable((), initializer="zeros", dtype="int32",
                                                 name="hvdlite_backward_passes")

    # -- sharded state (shard_optimizer_state=True) ---------------------------------------

    def _hvd_built_sharded(self, what):
        sharded = self._hvd_settings().sharded
        if sharded is None or not sharded.built:
            raise HvdliteInvalidArgumentError(
                f"{what}: this optimizer has no sharded state "
                + ("(it is not built yet: it builds at its first step)" if sharded is not None
                   else "(shard_optimizer_state=False)"))
        return sharded

    def consolidate_variables(self, to=0):
        """The sharded state gathered whole, for a checkpoint that loads at any size (torch:
        ``consolidate_state_dict``): see :meth:`hvdlite.keras.zero.ShardedState.consolidate`.
        A collective: every rank calls it, eagerly."""
        return self._hvd_built_sharded("consolidate_variables").consolidate(self, to)

    def load_consolidated_variables(self, values):
        """Load a ``consolidate_variables`` result (taken at any size) into this rank's
        shards (build the optimizer first: ``optimizer.build(model.trainable_variables)``).
        Local: no collective."""
        return self._hvd_built_sharded("load_consolidated_variables").load_consolidated(
            self, values)

    def reshard(self, values):
        """Re-cut the shards for the job's current size and load ``values`` (as
        ``load_consolidated_variables``; None: zero slots). Local. A model compiled with this
        optimizer must trace its train function again (``model.train_function = None``);
        ``KerasState`` does both."""
        sharded = self._hvd_built_sharded("reshard")
        sharding.check_reshardable(sharded.process_set, sharded.what)
        variables = list(self._trainable_variables)
        # Accumulated gradients (backward_passes_per_step) do not depend on the size: kept.
        kept = [np.array(keras.ops.convert_to_numpy(a.value)) for a in self._hvd_accumulated()]
        for v in self.variables[sharded.prebuilt:]:
            self._tracker.untrack(v)
        self._hvd_accumulators = self._hvd_passes = None
        self._trainable_variables_indices = {}
        self.built = False
        with keras.name_scope(self.name, caller=self):
            self.build(variables)       # new shards, owner and slots for this size
        self.built = True
        for a, value in zip(self._hvd_accumulated(), kept):
            a.assign(value)
        sharded.load_consolidated(self, values)

    # The protocol of elastic training (hvdlite.elastic.optimizer_state), with reshard above:
    # the whole state is consolidate_variables' list of values.
    def holds_shards(self):
        sharded = getattr(self._hvd, "sharded", None)
        return sharded is not None and sharded.built

    def needs_reshard(self):
        return self._hvd.sharded.needs_reshard()

    def consolidated(self):
        return self.consolidate_variables(to=None)

    load_consolidated = load_consolidated_variables

    def _hvd_accumulated(self):
        return list(self._hvd_accumulators or []) + (
            [self._hvd_passes] if self._hvd_passes is not None else [])

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        if not grads:
            return super().apply(grads, trainable_variables)
        if trainable_variables is None:
            if not self.built:
                return super().apply(grads, trainable_variables)  # Keras' own error
            variables = list(self._trainable_variables)
        else:
            trainable_variables = list(trainable_variables)
            variables = trainable_variables
            if not self.built:
                with keras.name_scope(self.name, caller=self):
                    self.build(variables)
                self.built = True
        settings = self._hvd_settings()
        if settings.backward_passes_per_step == 1:
            return self._hvd_update(settings, grads, variables, trainable_variables)
        return self._hvd_aggregate(settings, grads, variables, trainable_variables)

    def _hvd_update(self, settings, grads, variables, trainable_variables, when=None):
        """One update with this step's (local) gradients: reduce and apply, as the options
        say. ``when`` (a boolean tensor) gates the collectives where both branches run."""
        base_apply = super().apply
        if settings.sharded is not None:
            return settings.sharded.update(base_apply, grads, variables, when)
        if settings.local_sgd is not None:
            return settings.local_sgd.update(self, base_apply, settings.reduce, grads,
                                             variables, when)
        return base_apply(settings.reduce(grads, variables, when=when), trainable_variables)

    def _hvd_aggregate(self, settings, grads, variables, trainable_variables):
        n = settings.backward_passes_per_step
        accs = []
        for i, (g, v) in enumerate(zip(grads, variables)):
            if g is None:
                accs.append(None)
                continue
            g = bridge().dense_gradient(g, policy.variable_label(v, i),
                                        settings.sparse_as_dense, settings.what)
            acc = self._hvd_accumulators[self._hvd_index[self._var_key(v)]]
            acc.assign(acc + ops.cast(g, acc.dtype))
            accs.append(acc)
        passes = self._hvd_passes
        passes.assign(passes + 1)
        is_step = ops.equal(passes.value, n)

        def apply_step():
            summed = [None if a is None else a.value for a in accs]
            if settings.average_aggregated_gradients:
                # Dividing before the reduction equals dividing after it (both linear),
                # and lets every option (shards, local SGD) take the averaged sum.
                summed = [None if s is None else s / n for s in summed]
            self._hvd_update(settings, summed, variables, trainable_variables, when=is_step)
            for a in accs:
                if a is not None:
                    a.assign(ops.zeros_like(a.value))
            passes.assign(0)

        def skip_step():
            self.iterations.assign(self.iterations + 1)

        state = list(variables) + list(self.variables)
        bridge().cond(is_step, apply_step, skip_step, state)


def _distributed_class(base):
    return type(base.__name__, (_DistributedOptimizer, base),
                {"__module__": base.__module__, "__qualname__": base.__qualname__})


def DistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',
                         compression=None, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average,
                         backward_passes_per_step=1, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=None,
                         scale_local_gradients=True, shard_optimizer_state=False,
                         local_steps=None, local_sgd_warmup_steps=0,
                         average_optimizer_state=False):
    """Wrap a Keras 3 optimizer so that gradients are all-reduced across ranks before
    they are applied (Horovod's ``hvd.DistributedOptimizer``).

    Args:
        optimizer: a ``keras.optimizers.Optimizer`` instance (SGD, Adam, a
            LossScaleOptimizer, your own subclass...). A new optimizer of the same class
            and config is returned (state of an already built optimizer is copied).
        name: prefix of the all-reduce request names (default "Distributed<Class>").
        compression: ``Compression.none`` / ``fp16`` / ``bf16`` or a custom compressor.
        sparse_as_dense: TensorFlow: densify ``tf.IndexedSlices`` gradients (else their
            rows are all-gathered).
        gradient_predivide_factor: with op=Average, scale by 1/f before the sum and f/size
            after it.
        op: Average (default), Sum, Min, Max, Product or Adasum (the gradients combined by
            Adasum before the wrapped optimizer applies them, as in Horovod).
        backward_passes_per_step: accumulate this many calls locally; all-reduce and apply
            on every N-th call (``iterations`` still counts every call, as in Horovod).
        average_aggregated_gradients: divide the accumulated sum by N before applying.
        process_set: reduce over this process set only (default: all ranks).
        scale_local_gradients: divide the gradients of variables registered with
            ``register_local_var`` (which are not all-reduced) by the number of ranks.
        device_dense, device_sparse, num_groups, groups: accepted for Horovod
            compatibility (every gradient already goes in one group).

    Beyond Horovod (each also works with ``backward_passes_per_step`` and ``process_set``):
        compression: ``Compression.powersgd(rank, start_step)``, ``.topk(ratio)``,
            ``.fp16/bf16(error_feedback=True)`` (:mod:`.stateful_compression`).
        shard_optimizer_state: ZeRO-1, slots for 1/size of the variables (:mod:`.zero`).
        local_steps, local_sgd_warmup_steps, average_optimizer_state: local SGD
            (:mod:`.local_sgd`).
    """
    check_optimizer(optimizer, keras.optimizers.Optimizer, _DistributedOptimizer,
                    "keras.optimizers.Optimizer",
                    ". Use hvdlite.tensorflow.DistributedGradientTape (TensorFlow) or "
                    "hvdlite.torch.DistributedOptimizer (torch.optim) to all-reduce gradients "
                    "for other optimizers.")
    if shard_optimizer_state:
        sharding.check_shardable(optimizer, "DistributedOptimizer")
        if getattr(optimizer, "built", False):
            raise HvdliteInvalidArgumentError(
                "DistributedOptimizer(shard_optimizer_state=True): wrap the optimizer before "
                "it is built (its full-size slots cannot be cut into this rank's shard here)")
    settings = _HvdSettings(name or "Distributed" + type(optimizer).__name__, compression,
                            sparse_as_dense, op, gradient_predivide_factor,
                            backward_passes_per_step, average_aggregated_gradients,
                            process_set, scale_local_gradients, shard_optimizer_state,
                            local_steps, local_sgd_warmup_steps, average_optimizer_state)
    new = _distributed_class(type(optimizer)).from_config(optimizer.get_config())
    new._hvd = settings
    if getattr(optimizer, "built", False):
        # Carry over the state (slots, iterations) of an optimizer that already stepped.
        new.build(list(optimizer._trainable_variables))
        for dst, src in zip(new.variables, optimizer.variables):
            dst.assign(src)
    return new


def PartialDistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',
                                compression=None, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=Average, groups=None,
                                process_set=None, local_layers=None,
                                scale_local_gradients=True):
    """A ``DistributedOptimizer`` that keeps the gradients of ``local_layers``' trainable
    weights local (divided by the number of ranks when ``scale_local_gradients``)."""
    if local_layers is None:
        local_layers = []
    elif isinstance(local_layers, keras.layers.Layer):
        local_layers = [local_layers]
    elif not all(isinstance(layer, keras.layers.Layer) for layer in local_layers):
        raise ValueError("All local layers must be of keras.layers.Layer type.")
    opt = DistributedOptimizer(optimizer, name, device_dense, device_sparse, compression,
                               sparse_as_dense, gradient_predivide_factor, op,
                               groups=groups, process_set=process_set,
                               scale_local_gradients=scale_local_gradients)
    for layer in local_layers:
        for var in layer.trainable_weights:
            opt.register_local_var(var)
    return opt


def load_model(filepath, custom_optimizers=None, custom_objects=None, compression=None,
               **distributed_kwargs):
    """Load a Keras model saved with or without hvdlite and wrap its optimizer in a
    ``DistributedOptimizer`` (keeping the optimizer state that was saved, and hvdlite's own
    state of a model saved with the same options: accumulators, compression state,
    shards, the local SGD step). ``distributed_kwargs`` are ``DistributedOptimizer``'s."""
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or []:
        objects[cls.__name__] = cls
    name = distributed_kwargs.pop("name", None)

    def settings_for(cls):
        return _HvdSettings(name or "Distributed" + cls.__name__, compression,
                            **distributed_kwargs)

    base = _saved_optimizer_class(filepath, objects)
    if base is not None and settings_for(base).adds_variables():
        # Build the optimizer as a DistributedOptimizer from the start, so that Keras makes
        # hvdlite's variables too before it loads the saved ones into them.
        loading = type(base.__name__, (_distributed_class(base),), {"_hvd": settings_for(base)})
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model = keras.models.load_model(filepath,
                                            custom_objects={**objects, base.__name__: loading})
        skipped = False
        for w in caught:
            if "Skipping variable loading for optimizer" in str(w.message):
                skipped = True      # saved without these options: load it as plain below
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        if not skipped:
            opt = model.optimizer
            opt._hvd = loading._hvd     # the instance's own from now on
            sharded = opt._hvd.sharded
            if sharded is not None and sharded.built:
                sharded.check_owner(keras.ops.convert_to_numpy(sharded.owner.value))
            return model
    model = keras.models.load_model(filepath, custom_objects=objects or None)
    opt = getattr(model, "optimizer", None)
    if opt is not None and not isinstance(opt, _DistributedOptimizer):
        settings = settings_for(type(opt))
        if settings.sharded is not None and opt.built:
            raise HvdliteInvalidArgumentError(
                "load_model(shard_optimizer_state=True): the file holds unsharded optimizer "
                "state; load it without shard_optimizer_state")
        opt.__class__ = _distributed_class(type(opt))  # keeps the loaded slots
        opt._hvd = settings
        if opt.built:
            opt._hvd_build_state(settings, list(opt._trainable_variables))
    return model


def _saved_optimizer_class(filepath, objects):
    """The optimizer class a ``.keras`` file was compiled with (None if unknown)."""
    cls_name = compiled_optimizer_class_name(filepath)
    if cls_name is None:
        return None
    cls = objects.get(cls_name) or getattr(keras.optimizers, cls_name, None)
    return cls if isinstance(cls, type) and issubclass(cls, keras.optimizers.Optimizer) \
        else None
