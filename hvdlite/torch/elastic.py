"""Elastic training for PyTorch: ``hvd.elastic.TorchState`` and ``hvd.elastic.run``.

``TorchState(model, optimizer, **attrs)`` commits deep copies of the model's and optimizer's
state_dicts (plus the picklable ``attrs``), restores them after a lost rank and broadcasts
them from the lowest surviving rank (see :mod:`hvdlite.elastic`).

Sharded optimizer state (``shard_optimizer_state=True``): a lost rank takes its shard with
it, so a commit keeps the whole state on every rank (``consolidate_state_dict(to=None)``,
one all-gather of the state per commit, and the full state in host memory, as the saved
copy of an unsharded optimizer). When the job's size changed, ``reset`` re-cuts the shards
for the new size and loads that copy; ``sync`` broadcasts root's copy, which every rank
(one the job added too) cuts for itself. So ``sync`` sends the last committed optimizer
state: create the state after loading a checkpoint into the optimizer.
"""

import copy

from hvdlite.elastic import (HorovodInternalError, HostsUpdatedInterrupt,
                             HvdliteHostsUpdatedInterrupt, HvdliteInternalError,
                             HvdliteRanksLostError, ObjectState, State, run, run_fn)
from hvdlite import _core

from .functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters


class TorchState(ObjectState):
    """Elastic state of a model, its optimizer and any picklable attributes (epoch, batch...)."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        self.model = model
        self.optimizer = optimizer
        self._saved_model = copy.deepcopy(model.state_dict()) if model is not None else None
        self._saved_optimizer = self._optimizer_state()
        super().__init__(bcast_object=broadcast_object, get_rank=_core.rank, **kwargs)

    def _sharded(self):
        return getattr(self.optimizer, "_hvd_sharded", False)

    def _optimizer_state(self):
        """A copy of the optimizer's state that survives the loss of any rank: for a sharded
        optimizer the consolidated (whole) state on every rank. Collective only when the
        optimizer has state (a fresh one, as on a rank the job added, has none to gather)."""
        if self.optimizer is None:
            return None
        if self._sharded():
            return self.optimizer.consolidate_state_dict(to=None)
        return copy.deepcopy(self.optimizer.state_dict())

    def save(self):
        if self.model is not None:
            self._saved_model = copy.deepcopy(self.model.state_dict())
        self._saved_optimizer = self._optimizer_state()
        super().save()

    def restore(self):
        if self.model is not None:
            self.model.load_state_dict(self._saved_model)
        if self.optimizer is not None:
            # Also drops gradient reductions the failure left half done. (A sharded optimizer
            # takes the consolidated copy at its current layout; reset() re-cuts it.)
            self.optimizer.load_state_dict(self._saved_optimizer)
        super().restore()

    def sync(self):
        if self.model is not None:
            broadcast_parameters(self.model.state_dict(), root_rank=0)
        if self._sharded():
            # Root's live shard is only its slice, and a rank the job added holds no state:
            # root's whole copy of the last commit (what every rank restored or just saved).
            self._saved_optimizer = broadcast_object(self._saved_optimizer, root_rank=0,
                                                     name="hvdlite.elastic.sharded_state")
            self.optimizer.load_state_dict(self._saved_optimizer)
        elif self.optimizer is not None:
            broadcast_optimizer_state(self.optimizer, root_rank=0)
        super().sync()

    def reset(self):
        if self._sharded() and self.optimizer.needs_reshard():
            # The shards were cut for the old size, and a lost rank's shard is gone: every
            # rank re-cuts them and loads the last commit's whole state.
            self.optimizer.reshard(self._saved_optimizer)
        # A DistributedOptimizer averages over the job's size, which the rebuild changed.
        if self.optimizer is not None and hasattr(self.optimizer, "_hvd_size"):
            self.optimizer._hvd_size = _core.size()


__all__ = ["TorchState", "ObjectState", "State", "run", "run_fn", "HorovodInternalError",
           "HostsUpdatedInterrupt", "HvdliteInternalError", "HvdliteRanksLostError",
           "HvdliteHostsUpdatedInterrupt"]
