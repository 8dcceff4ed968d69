"""Elastic training for TensorFlow: ``hvd.elastic.TensorFlowKerasState``,
``hvd.elastic.TensorFlowState`` and ``hvd.elastic.run``.

Inside a ``tf.function`` a collective's error reaches Python as a ``tf.errors.OpError``
naming the hvdlite error; ``run`` turns those back into hvdlite's errors so a lost rank is
recovered from the same way as eagerly (see :mod:`hvdlite.elastic`).
"""

import functools

import numpy as np
import tensorflow as tf

from hvdlite import _core
from hvdlite.exceptions import raise_replaced
from hvdlite import elastic as _elastic
from hvdlite.elastic.optimizer_state import OptimizerState
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


def _values(variables):
    return [np.array(v) for v in variables]


class _VariablesState(ObjectState):
    """Elastic state of some TensorFlow variables and picklable attributes (epoch, batch...).

    ``commit`` keeps copies of the variables' values, ``restore`` assigns them back, ``sync``
    broadcasts them from rank 0 and keeps the result as the committed state (as Horovod).
    """

    def __init__(self, **kwargs):
        self._save_variables()
        super().__init__(bcast_object=broadcast_object, get_rank=_core.rank, **kwargs)

    def _variables(self):
        raise NotImplementedError

    def _save_variables(self):
        self._saved = _values(self._variables())

    def _load_variables(self):
        for v, value in zip(self._variables(), self._saved):
            v.assign(value)

    def save(self):
        self._save_variables()
        super().save()

    def restore(self):
        self._load_variables()
        super().restore()

    def sync(self):
        variables = self._variables()
        if variables:
            broadcast_variables(variables, root_rank=0)
        self._save_variables()
        super().sync()


class TensorFlowState(_VariablesState):
    """Elastic state of a list of ``tf.Variable`` (eagerly), as Horovod's."""

    def __init__(self, variables=None, session=None, **kwargs):
        if variables is None or session is not None or not tf.executing_eagerly():
            raise _errors.HvdliteUnsupportedError(
                "hvdlite.tensorflow.elastic.TensorFlowState: pass the variables and run "
                "eagerly (TF1 sessions and global variables are not supported)")
        self.variables = list(variables)
        super().__init__(**kwargs)

    def _variables(self):
        return self.variables


class TensorFlowKerasState(_VariablesState):
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
        super().__init__(**kwargs)

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

    def _save_variables(self):
        super()._save_variables()
        # Collective for a sharded optimizer (a fresh one, as on a rank the job added, is not
        # built yet and has nothing to gather).
        self._optimizer_state.save()

    def _load_variables(self):
        variables = self._variables()
        for v, value in zip(variables, self._saved):
            v.assign(value)
        # Variables the optimizer made after the last commit (it was built since) had their
        # initial value then: zero (slots, accumulators; not the learning rate, made before).
        for v in variables[len(self._saved):]:
            v.assign(np.zeros(v.shape, dtype=np.array(v).dtype))
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
