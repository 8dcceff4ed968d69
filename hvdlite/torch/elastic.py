"""Elastic training for PyTorch: ``hvd.elastic.TorchState`` and ``hvd.elastic.run``.

``TorchState(model, optimizer, **attrs)`` commits deep copies of the model's and optimizer's
state_dicts (plus the picklable ``attrs``), restores them after a lost rank and broadcasts
them from the lowest surviving rank (see :mod:`hvdlite.elastic`).
"""

import copy

from hvdlite.elastic import (HorovodInternalError, HostsUpdatedInterrupt,
                             HvdliteHostsUpdatedInterrupt, HvdliteInternalError,
                             HvdliteRanksLostError, ObjectState, State, run, run_fn)
from hvdlite import _core
from hvdlite.exceptions import HvdliteInvalidArgumentError

from .functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters


class TorchState(ObjectState):
    """Elastic state of a model, its optimizer and any picklable attributes (epoch, batch...)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        self._saved_model = copy.deepcopy(model.state_dict()) if model is not None else None
        self._saved_optimizer = (copy.deepcopy(optimizer.state_dict())
                                 if optimizer is not None else None)
        super().__init__(bcast_object=broadcast_object, get_rank=_core.rank, **kwargs)

    def save(self):
        if self.model is not None:
            self._saved_model = copy.deepcopy(self.model.state_dict())
        if self.optimizer is not None:
            self._saved_optimizer = copy.deepcopy(self.optimizer.state_dict())
        super().save()

    def restore(self):
        if self.model is not None:
            self.model.load_state_dict(self._saved_model)
        if self.optimizer is not None:
            # Also drops gradient reductions the failure left half done.
            self.optimizer.load_state_dict(self._saved_optimizer)
        super().restore()

    def sync(self):
        if self.model is not None:
            broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root_rank=0)
        super().sync()

    def reset(self):
        if getattr(self.optimizer, "_hvd_sharded", False) and \
                self.optimizer._zero_size != _core.size():
            raise HvdliteInvalidArgumentError(
                f"elastic training changed the job from {self.optimizer._zero_size} to "
                f"{_core.size()} ranks, but a DistributedOptimizer with "
                f"shard_optimizer_state=True cannot be resharded in place. Save "
                f"optimizer.consolidate_state_dict() and load it into a new sharded "
                f"optimizer, or use shard_optimizer_state=False with elastic training")
        # A DistributedOptimizer averages over the job's size, which the rebuild changed.
        if self.optimizer is not None and hasattr(self.optimizer, "_hvd_size"):
            self.optimizer._hvd_size = _core.size()


__all__ = ["TorchState", "ObjectState", "State", "run", "run_fn", "HorovodInternalError",
           "HostsUpdatedInterrupt", "HvdliteInternalError", "HvdliteRanksLostError",
           "HvdliteHostsUpdatedInterrupt"]
