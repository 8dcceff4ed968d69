"""hvdlite for Keras 3 on TensorFlow: ``import hvdlite.tensorflow.keras as hvd``
(also importable as ``hvdlite.keras``).

Example::

    import keras
    import hvdlite.tensorflow.keras as hvd

    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size()))
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    model.fit(x_shard, y_shard, epochs=5,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                         hvd.callbacks.MetricAverageCallback()],
              verbose=1 if hvd.rank() == 0 else 0)

How the optimizer is distributed: with the TensorFlow backend Keras 3.x's ``model.fit``
and ``train_on_batch`` call ``optimizer.apply_gradients(zip(grads, vars))`` inside their
``tf.function``, which calls ``optimizer.apply(grads, vars)``; custom loops call either.
``DistributedOptimizer`` returns an instance of a subclass of your optimizer's class
(same class name and module, so saved models load without hvdlite) whose ``apply``
all-reduces the gradients (all dense ones in one grouped request) before the usual update.
"""

import tensorflow as tf
import keras

import hvdlite.tensorflow as _hvd_tf
from hvdlite.tensorflow import *  # noqa: F401,F403 - Horovod's hvd.keras re-exports the basics
from hvdlite.tensorflow import (Average, Compression, Sum, init, rank, shutdown,  # noqa: F401
                                size, local_rank, local_size, cross_rank, cross_size,
                                is_initialized, mpi_built, nccl_built, allgather_object,
                                broadcast_object, broadcast_variables, start_timeline,
                                stop_timeline)
from hvdlite.compression import is_stateful
from hvdlite.tensorflow.distributed import make_allreduce_grads_fn
from hvdlite.tensorflow.mpi_ops import resolve_op

from . import callbacks  # noqa: F401
# Not `from . import elastic`: the star import above already bound hvdlite.tensorflow.elastic.
elastic = __import__("importlib").import_module(".elastic", __name__)


class _HvdState:
    """Per-optimizer settings and accumulators; a plain object so Keras does not track it."""

    def __init__(self, name, compression=Compression.none, sparse_as_dense=False,
                 op=Average, gradient_predivide_factor=1.0, backward_passes_per_step=1,
                 average_aggregated_gradients=False):
        self.name = name
        self.sparse_as_dense = sparse_as_dense
        self.backward_passes_per_step = int(backward_passes_per_step)
        self.average_aggregated_gradients = bool(average_aggregated_gradients)
        if is_stateful(compression):   # PowerSGD, top-k, casts with error feedback
            from hvdlite.tensorflow.stateful_compression import make_stateful_reduce_fn
            self.allreduce_grads = make_stateful_reduce_fn(
                name, compression, op, gradient_predivide_factor,
                what=f"DistributedOptimizer({name})")
        else:
            self.allreduce_grads = make_allreduce_grads_fn(
                name, compression, sparse_as_dense, op, gradient_predivide_factor,
                what=f"DistributedOptimizer({name})")
        self.accumulators = None   # var key -> tf.Variable (backward_passes_per_step > 1)
        self.counter = None


class _DistributedOptimizer:
    """Mixed in before the wrapped optimizer's class (see ``DistributedOptimizer``)."""

    _hvd = None

    def _hvd_state(self):
        if self._hvd is None:  # e.g. made by from_config on the dynamic class
            self._hvd = _HvdState("Distributed" + type(self).__name__)
        return self._hvd

    @property
    def hvdlite_reducer(self):
        """The stateful compression's reducer (None for plain all-reduce)."""
        return getattr(self._hvd_state().allreduce_grads, "reducer", None)

    def build(self, variables):
        super().build(variables)
        self._hvd_make_accumulators(variables)

    def _hvd_make_accumulators(self, variables):
        state = self._hvd_state()
        if state.backward_passes_per_step > 1 and state.accumulators is None:
            with tf.init_scope():
                state.accumulators = {
                    self._var_key(v): tf.Variable(tf.zeros(v.shape, dtype=v.dtype),
                                                  trainable=False,
                                                  name="hvdlite_grad_accumulator")
                    for v in variables}
                state.counter = tf.Variable(0, dtype=tf.int64, trainable=False,
                                            name="hvdlite_backward_passes")

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
        state = self._hvd_state()
        if state.backward_passes_per_step == 1:
            reduced = state.allreduce_grads(grads, variables)
            return super().apply(reduced, trainable_variables)
        return self._hvd_aggregate(state, grads, variables, trainable_variables)

    def _hvd_aggregate(self, state, grads, variables, trainable_variables):
        """Horovod's local gradient aggregation: accumulate every call; every N-th call
        all-reduce the sums (divided by N if average_aggregated_gradients), apply them and
        reset. The other calls only advance ``iterations``, as in Horovod."""
        n = state.backward_passes_per_step
        accs = []
        for i, (g, v) in enumerate(zip(grads, variables)):
            if g is None:
                accs.append(None)
                continue
            if isinstance(g, tf.IndexedSlices):
                if not state.sparse_as_dense:
                    label = getattr(v, "path", None) or getattr(v, "name", f"variable {i}")
                    raise ValueError(
                        f"DistributedOptimizer({state.name}): the gradient of '{label}' is a "
                        f"tf.IndexedSlices; backward_passes_per_step > 1 needs "
                        f"sparse_as_dense=True to accumulate it")
                g = tf.convert_to_tensor(g)
            acc = state.accumulators[self._var_key(v)]
            acc.assign_add(tf.cast(g, acc.dtype))
            accs.append(acc)
        state.counter.assign_add(1)
        count = state.counter.read_value()
        base_apply = super().apply

        def apply_step():
            summed = [None if a is None else a.read_value() for a in accs]
            reduced = state.allreduce_grads(summed, variables)
            if state.average_aggregated_gradients:
                reduced = [None if r is None else r / tf.cast(n, r.dtype) for r in reduced]
            base_apply(reduced, trainable_variables)
            for a in accs:
                if a is not None:
                    a.assign(tf.zeros_like(a))
            state.counter.assign(0)
            return tf.constant(True)

        def skip_step():
            self.iterations.assign_add(1)
            return tf.constant(False)

        if tf.executing_eagerly():
            return apply_step() if int(count) == n else skip_step()
        return tf.cond(tf.equal(count, n), apply_step, skip_step)


def _check_keras_optimizer(optimizer):
    if isinstance(optimizer, type):
        raise TypeError(f"hvdlite DistributedOptimizer expects an optimizer instance, got the "
                        f"class {optimizer.__name__}; pass e.g. {optimizer.__name__}(...)")
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(
            f"hvdlite DistributedOptimizer wraps Keras 3 optimizers (keras.optimizers."
            f"Optimizer); got {type(optimizer).__module__}.{type(optimizer).__name__}. "
            f"Use hvdlite.tensorflow.DistributedGradientTape to all-reduce gradients for "
            f"other optimizers.")
    if isinstance(optimizer, _DistributedOptimizer):
        raise ValueError("this optimizer is already an hvdlite DistributedOptimizer; wrapping "
                         "it again would all-reduce every gradient twice")


def _distributed_class(base):
    return type(base.__name__, (_DistributedOptimizer, base),
                {"__module__": base.__module__, "__qualname__": base.__qualname__})


def DistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='',
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average,
                         backward_passes_per_step=1, average_aggregated_gradients=False):
    """Wrap a Keras 3 optimizer so that gradients are all-reduced across ranks before
    they are applied (Horovod's ``hvd.DistributedOptimizer``).

    Args:
        optimizer: a ``keras.optimizers.Optimizer`` instance (SGD, Adam, a
            LossScaleOptimizer, your own subclass...). A new optimizer of the same class
            and config is returned (state of an already built optimizer is copied).
        name: prefix of the all-reduce request names (default "Distributed<Class>").
        compression: ``Compression.none`` / ``fp16`` / ``bf16`` or a custom compressor.
        sparse_as_dense: densify ``tf.IndexedSlices`` gradients (else they are all-gathered).
        gradient_predivide_factor: with op=Average, scale by 1/f before the sum and f/size
            after it.
        op: Average (default), Sum, Min, Max or Product.
        backward_passes_per_step: accumulate this many calls locally; all-reduce and apply
            on every N-th call (``iterations`` still counts every call, as in Horovod).
        average_aggregated_gradients: divide the accumulated sum by N before applying.
        device_dense, device_sparse: accepted for Horovod compatibility, ignored.
    """
    _check_keras_optimizer(optimizer)
    if int(backward_passes_per_step) < 1:
        raise ValueError("backward_passes_per_step must be >= 1")
    resolve_op(op, None, "DistributedOptimizer")
    cls = _distributed_class(type(optimizer))
    new = cls.from_config(optimizer.get_config())
    new._hvd = _HvdState(name or "Distributed" + type(optimizer).__name__, compression,
                         sparse_as_dense, op, gradient_predivide_factor,
                         backward_passes_per_step, average_aggregated_gradients)
    if getattr(optimizer, "built", False):
        # Carry over the state (slots, iterations) of an optimizer that already stepped.
        new.build(list(optimizer._trainable_variables))
        for dst, src in zip(new.variables, optimizer.variables):
            dst.assign(src)
    return new


# ----------------------------------------------- Horovod's hvd.keras value-level helpers

def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none):
    """All-reduce a value (number, numpy array or tensor); returns a tensor."""
    return _hvd_tf.allreduce(tf.constant(value) if not tf.is_tensor(value) else value,
                             average=average, prescale_factor=prescale_factor,
                             postscale_factor=postscale_factor, op=op,
                             compression=compression, name=name)


def allgather(value, name=None):
    """All-gather a value along its first dimension; returns a tensor."""
    return _hvd_tf.allgather(tf.constant(value) if not tf.is_tensor(value) else value,
                             name=name)


def broadcast(value, root_rank, name=None):
    """Broadcast a value from ``root_rank``; returns a tensor."""
    return _hvd_tf.broadcast(tf.constant(value) if not tf.is_tensor(value) else value,
                             root_rank, name=name)


def reducescatter(value, name=None, op=Average):
    """Reduce-scatter a value along its first dimension; returns a tensor."""
    return _hvd_tf.reducescatter(tf.constant(value) if not tf.is_tensor(value) else value,
                                 op=op, name=name)


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none, **distributed_kwargs):
    """Load a Keras model saved with or without hvdlite and wrap its optimizer in a
    ``DistributedOptimizer`` (keeping the optimizer state that was saved)."""
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or []:
        objects[cls.__name__] = cls
    model = keras.models.load_model(filepath, custom_objects=objects or None)
    opt = getattr(model, "optimizer", None)
    if opt is not None and not isinstance(opt, _DistributedOptimizer):
        state = _HvdState(distributed_kwargs.pop("name", None) or
                          "Distributed" + type(opt).__name__, compression,
                          **distributed_kwargs)
        opt.__class__ = _distributed_class(type(opt))  # keeps the loaded slots
        opt._hvd = state
        if opt.built:
            opt._hvd_make_accumulators(list(opt._trainable_variables))
    return model
