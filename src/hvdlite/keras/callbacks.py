"""Keras 3 callbacks with Horovod's semantics: ``BroadcastGlobalVariablesCallback``,
``MetricAverageCallback``, ``LearningRateScheduleCallback``, ``LearningRateWarmupCallback``.

They run eagerly between steps on every backend (on JAX, ``self.model`` first writes the
trainer's state back into the variables), so they are written once against Keras'
variables and numpy.
"""

import warnings

import keras

import hvdlite as _hvd
from hvdlite.algorithms import metric_average
from hvdlite.algorithms.lr_schedule import LRSchedule, momentum_ratio, warmup_multiplier

from .functions import broadcast_variables


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Broadcast the model's and the optimizer's variables from ``root_rank`` so that every
    rank starts training from the same state.

    Keras 3 may build the optimizer only when the train function is first traced (the
    TensorFlow backend does); this callback builds it (as ``compile_from_config`` does) in
    ``on_train_begin`` when the model is built, and broadcasts everything there, before the
    first step. If the model itself is not built yet (a subclassed model that never saw
    data), the model's variables that exist are broadcast then and everything again after
    the first batch, which is what Horovod did for Keras 2.
    """

    def __init__(self, root_rank=0, device='', local_variables=None):
        super().__init__()
        self.root_rank = int(root_rank)
        self.broadcast_done = False
        self._local_vars = {}
        if local_variables is None:
            local_variables = []
        elif not isinstance(local_variables, (list, tuple, set)):
            local_variables = [local_variables]
        for var in local_variables:
            self.register_local_var(var)

    def register_local_var(self, var):
        """Leave ``var`` out of the broadcast: each rank keeps its own value."""
        self._local_vars[id(var)] = var

    def _global(self, variables):
        return [v for v in variables if id(v) not in self._local_vars]

    def _broadcast(self):
        """Broadcast what exists; True when the optimizer's state was included."""
        model = self.model
        opt = getattr(model, "optimizer", None)
        if opt is not None and not getattr(opt, "built", True) and getattr(model, "built", False) \
                and model.trainable_variables:
            opt.build(model.trainable_variables)
        broadcast_variables(self._global(model.variables), root_rank=self.root_rank)
        if opt is not None and getattr(opt, "built", False):
            broadcast_variables(opt.variables, root_rank=self.root_rank)
            return True
        return opt is None

    def on_train_begin(self, logs=None):
        if not self.broadcast_done:
            self.broadcast_done = self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast()
            self.broadcast_done = True


class MetricAverageCallback(keras.callbacks.Callback):
    """Average the epoch's metrics (the ``logs`` dict) over all ranks at the end of every
    epoch, in place, so callbacks placed after it (and the progress bar, which Keras puts
    last) see the global values. All metrics go to the core as one vector.

    Every rank must log the same metric names (e.g. validation data on every rank or on
    none).
    """

    def __init__(self, device=''):
        super().__init__()

    def _average_metrics_in_place(self, logs):
        metric_average.average_in_place(logs)

    def on_epoch_end(self, epoch, logs=None):
        self._average_metrics_in_place(logs)


def _get_lr(optimizer):
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


def _inner(optimizer):
    return getattr(optimizer, "inner_optimizer", optimizer)


def _momentum_slots(optimizer):
    """The velocity variables that an optimizer multiplies by its ``momentum``."""
    opt = _inner(optimizer)
    if not getattr(opt, "built", True):
        return []  # the velocities do not exist yet; they start at zero: nothing to scale
    for attr in ("momentums", "_momentums"):
        slots = getattr(opt, attr, None)
        if slots is not None:
            return [s for s in slots if s is not None]
    return None


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Set the learning rate to ``initial_lr * multiplier(epoch)`` between ``start_epoch``
    (inclusive) and ``end_epoch`` (exclusive), as Horovod does.

    ``multiplier`` is a number (exponential decay: ``multiplier ** epoch``) or a function
    of the epoch. With ``staircase=True`` the rate changes at the start of each epoch;
    otherwise at every batch, with a fractional epoch ``epoch + batch / steps_per_epoch``
    (``steps_per_epoch`` defaults to what ``fit`` reports).

    ``momentum_correction`` (Goyal et al., 2017): when the rate changes from ``old`` to
    ``new``, Horovod multiplies the optimizer's momentum by ``new / old`` for that batch.
    Keras 3 compiles ``momentum`` into the train function as a constant, so hvdlite scales
    the velocity slots by ``new / old`` instead, which gives the same update for SGD
    (``v = m*v - lr*g``) and RMSprop with momentum; for Nesterov SGD the look-ahead term
    keeps the uncorrected momentum.
    """

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        self.schedule = LRSchedule(initial_lr, multiplier, start_epoch, end_epoch, staircase)
        self.initial_lr, self.multiplier = self.schedule.initial_lr, self.schedule.multiplier
        self.start_epoch, self.end_epoch, self.staircase = start_epoch, end_epoch, staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        self._warned_momentum = False

    def _adjust_learning_rate(self, epoch):
        opt = self.model.optimizer
        old_lr = _get_lr(opt)
        new_lr = self.schedule.rate(epoch)
        try:
            opt.learning_rate = new_lr
        except TypeError as e:
            raise TypeError(f"{type(self).__name__} sets the optimizer's learning rate, which "
                            f"needs a float learning_rate, not a schedule: {e}") from e
        ratio = momentum_ratio(old_lr, new_lr, getattr(_inner(opt), "momentum", None),
                               self.momentum_correction)
        if ratio is not None:
            slots = _momentum_slots(opt)
            if slots:
                for s in slots:
                    s.assign(s * ratio)
            elif slots is None and not self._warned_momentum:
                self._warned_momentum = True
                warnings.warn(f"{type(self).__name__}: momentum correction is not supported "
                              f"for {type(_inner(opt)).__name__}; skipped")

    def on_train_begin(self, logs=None):
        self.steps_per_epoch = self.schedule.steps_per_epoch(
            self.steps_per_epoch, (self.params or {}).get("steps"), type(self).__name__)

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        epoch = self.schedule.epoch_to_set(self.current_epoch, batch, self.steps_per_epoch)
        if epoch is not None:
            self._adjust_learning_rate(epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = _get_lr(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramp the learning rate from ``initial_lr / size`` to ``initial_lr`` over
    ``warmup_epochs`` epochs, batch by batch (Goyal et al., 2017), as Horovod does:
    ``lr = initial_lr / size * (epoch' * (size - 1) / warmup_epochs + 1)`` with
    ``epoch' = epoch + (batch + 1) / steps_per_epoch``, so the last batch of the warm-up
    runs at ``initial_lr``.
    """

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        multiplier = warmup_multiplier(warmup_epochs, _hvd.size, lambda: self.steps_per_epoch)
        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.warmup_epochs = warmup_epochs
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and _hvd.rank() == 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                  f"{_get_lr(self.model.optimizer):g}.")
