"""Elastic training for TensorFlow: ``hvd.elastic.TensorFlowKerasState`` and ``hvd.elastic.run``.

Inside a ``tf.function`` a collective's error reaches Python as a ``tf.errors.OpError``
naming the hvdlite error; ``run`` turns those back into hvdlite's errors so a lost rank is
recovered from the same way as eagerly (see :mod:`hvdlite.elastic`).
"""

import functools

import numpy as np
import tensorflow as tf

from hvdlite import _core
from hvdlite import elastic as _elastic
from hvdlite.elastic import (HorovodInternalError, HostsUpdatedInterrupt,  # noqa: F401
                             HvdliteHostsUpdatedInterrupt, HvdliteInternalError,
                             HvdliteRanksLostError, ObjectState, State)

from .functions import broadcast_object, broadcast_variables


def _as_hvdlite_error(error):
    """The hvdlite error a graph op reported, or None when it was something else."""
    text = str(getattr(error, "message", error))
    if "HvdliteRanksLostError" in text:
        return HvdliteRanksLostError(text)
    if "HvdliteInternalError" in text:
        return HvdliteInternalError(text)
    return None


def _translating(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except tf.errors.OpError as e:
            mapped = _as_hvdlite_error(e)
            if mapped is None:
                raise
            raise mapped from e
    return wrapper


def run(func):
    """Decorator: run ``func(state, ...)`` elastically (graph-mode errors included)."""
    return _elastic.run(_translating(func))


def _values(variables):
    return [np.array(v) for v in variables]


class TensorFlowKerasState(ObjectState):
    """Elastic state of a Keras model, its optimizer and picklable attributes (epoch, batch...).

    ``commit`` keeps copies of the model's weights and the optimizer's variables, ``restore``
    assigns them back, ``sync`` broadcasts them from rank 0.
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self._saved_weights = _values(model.weights)
        self._saved_optimizer = self._optimizer_values()
        super().__init__(bcast_object=broadcast_object, get_rank=_core.rank, **kwargs)

    def _optimizer_variables(self):
        return list(self.optimizer.variables) if self.optimizer is not None else []

    def _optimizer_values(self):
        return _values(self._optimizer_variables())

    def save(self):
        self._saved_weights = _values(self.model.weights)
        self._saved_optimizer = self._optimizer_values()
        super().save()

    def restore(self):
        for v, value in zip(self.model.weights, self._saved_weights):
            v.assign(value)
        variables = self._optimizer_variables()
        if len(variables) == len(self._saved_optimizer):
            for v, value in zip(variables, self._saved_optimizer):
                v.assign(value)
        else:
            # Built after the last commit: its state then was the initial one (all zeros).
            for v in variables:
                v.assign(np.zeros(v.shape, dtype=np.array(v).dtype))
        super().restore()

    def sync(self):
        if (self.optimizer is not None and not getattr(self.optimizer, "built", True)
                and self.model.trainable_variables):
            # A rank the job added has not stepped yet: its optimizer needs the others'
            # variables (momentum...) to receive them.
            self.optimizer.build(self.model.trainable_variables)
        variables = list(self.model.weights) + self._optimizer_variables()
        if variables:
            broadcast_variables(variables, root_rank=0)
        super().sync()


__all__ = ["TensorFlowKerasState", "ObjectState", "State", "run", "HorovodInternalError",
           "HostsUpdatedInterrupt", "HvdliteInternalError", "HvdliteRanksLostError",
           "HvdliteHostsUpdatedInterrupt"]
