"""Elastic training for TensorFlow: ``hvd.elastic.TensorFlowKerasState``,
``hvd.elastic.TensorFlowState`` and ``hvd.elastic.run``.

Inside a ``tf.function`` a collective's error reaches Python as a ``tf.errors.OpError``
naming the hvdlite error; ``run`` turns those back into hvdlite's errors so a lost rank is
recovered from the same way as eagerly (see :mod:`hvdlite.elastic`).
"""

import functools

import tensorflow as tf

from hvdlite import _core
from hvdlite.exceptions import raise_replaced
from hvdlite import elastic as _elastic
from hvdlite.elastic.optimizer_state import OptimizerState
from hvdlite.elastic.variables_state import VariablesState
from hvdlite.elastic import (HorovodInternalError, HostsUpdatedInterrupt,  # noqa: F401
                             HvdliteHostsUpdatedInterrupt, HvdliteInternalError,
                             HvdliteRanksLostError, ObjectState, State)

from . import errors as _errors
from .functions import broadcast_object, broadcast_variables


def _translating(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except tf.errors.OpError as e:
            raise_replaced(e, _errors.recoverable(e) or e)
    return wrapper


def run(func):
    """Decorator: run ``func(state, ...)`` elastically (graph-mode errors included)."""
    return _elastic.run(_translating(func))


class TensorFlowState(VariablesState):
    """Elastic state of a list of ``tf.Variable`` (eagerly), as Horovod's."""

    def __init__(self, variables=None, session=None, **kwargs):
        if variables is None or session is not None or not tf.executing_eagerly():
            raise _errors.HvdliteUnsupportedError(
                "hvdlite.tensorflow.elastic.TensorFlowState: pass the variables and run "
                "eagerly (TF1 sessions and global variables are not supported)")
        self.variables = list(variables)
        super().__init__(broadcast_variables, broadcast_object, _core.rank, **kwargs)

    def _variables(self):
        return self.variables


class TensorFlowKerasState(VariablesState):
    """Elastic state of a Keras model, its optimizer and picklable attributes.

    A sharded optimizer (``shard_optimizer_state=True``) is committed whole on every rank
    (``consolidate_variables(to=None)``) and re-cut when the job's size changed
    (:mod:`hvdlite.elastic.optimizer_state`); ``sync`` sends the last committed optimizer
    state.
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self._optimizer_state = OptimizerState(self.optimizer, broadcast_object)
        super().__init__(broadcast_variables, broadcast_object, _core.rank, **kwargs)
        self._optimizer_state.save()

    def _optimizer_variables(self):
        if self.optimizer is None:
            return []
        variables = list(self.optimizer.variables)
        if not self._optimizer_state.holds_shards():
            return variables
        # The shards and their slots are cut for the size: the consolidated copy keeps them.
        sharded = self.optimizer._hvd.sharded
        return variables[:sharded.prebuilt] + variables[sharded.slot_end:]

    def _variables(self):
        return list(self.model.weights) + self._optimizer_variables()

    def save(self):
        # Collective for a sharded optimizer (a fresh one, as on a rank the job added, is not
        # built yet and has nothing to gather). Not at sync: that keeps root's copy as it is.
        self._optimizer_state.save()
        super().save()

    def _load_variables(self):
        super()._load_variables()
        self._optimizer_state.restore()

    def sync(self):
        if (self.optimizer is not None and not getattr(self.optimizer, "built", True)
                and self.model.trainable_variables):
            # A rank the job added has not stepped yet: its optimizer needs the others'
            # variables (momentum...) to receive them.
            self.optimizer.build(self.model.trainable_variables)
        self._optimizer_state.sync()
        super().sync()

    def reset(self):
        if self._optimizer_state.reset():
            # The train function was traced with the old shards' variables.
            self.model.train_function = None
        super().reset()


__all__ = ["TensorFlowKerasState", "TensorFlowState", "ObjectState", "State", "run", "HorovodInternalError",
           "HostsUpdatedInterrupt", "HvdliteInternalError", "HvdliteRanksLostError",
           "HvdliteHostsUpdatedInterrupt"]
