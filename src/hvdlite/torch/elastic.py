"""Elastic training for PyTorch: ``hvd.elastic.TorchState`` and ``hvd.elastic.run``.

``TorchState(model, optimizer, **attrs)`` commits deep copies of the model's and optimizer's
state_dicts (plus the picklable ``attrs``), restores them after a lost rank and broadcasts
them from the lowest surviving rank (see :mod:`hvdlite.elastic`).

A sharded optimizer (``shard_optimizer_state=True``) is committed whole on every rank instead
(``consolidate_state_dict(to=None)``) and re-cut when the job's size changed
(:mod:`hvdlite.elastic.optimizer_state`); its ``sync`` sends the last committed optimizer
state: create the state after loading a checkpoint into the optimizer.
"""

import copy

from hvdlite.elastic import (HorovodInternalError, HostsUpdatedInterrupt,
                             HvdliteHostsUpdatedInterrupt, HvdliteInternalError,
                             HvdliteRanksLostError, ObjectState, State, run, run_fn)
from hvdlite.elastic.optimizer_state import OptimizerState
from hvdlite import _core

from .functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters


class TorchState(ObjectState):
    """Elastic state of a model, its optimizer and any picklable attributes (epoch, batch...)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        self._optimizer_state = OptimizerState(optimizer, broadcast_object)
        self._saved_model = copy.deepcopy(model.state_dict()) if model is not None else None
        self._save_optimizer()
        super().__init__(bcast_object=broadcast_object, get_rank=_core.rank, **kwargs)

    def _save_optimizer(self):
        """A copy of the optimizer's state that survives the loss of any rank (for a sharded
        optimizer the whole state, kept by ``_optimizer_state``)."""
        self._saved_optimizer = None
        if not self._optimizer_state.save() and self.optimizer is not None:
            self._saved_optimizer = copy.deepcopy(self.optimizer.state_dict())

    def save(self):
        if self.model is not None:
            self._saved_model = copy.deepcopy(self.model.state_dict())
        self._save_optimizer()
        super().save()

    def restore(self):
        if self.model is not None:
            self.model.load_state_dict(self._saved_model)
        # load_state_dict also drops gradient reductions the failure left half done.
        if not self._optimizer_state.restore() and self.optimizer is not None:
            self.optimizer.load_state_dict(self._saved_optimizer)
        super().restore()

    def sync(self):
        if self.model is not None:
            broadcast_parameters(self.model.state_dict(), root_rank=0)
        if not self._optimizer_state.sync() and self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root_rank=0)
        super().sync()

    def reset(self):
        self._optimizer_state.reset()


__all__ = ["TorchState", "ObjectState", "State", "run", "run_fn", "HorovodInternalError",
           "HostsUpdatedInterrupt", "HvdliteInternalError", "HvdliteRanksLostError",
           "HvdliteHostsUpdatedInterrupt"]
