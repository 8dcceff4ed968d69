"""State objects: what elastic training commits, rolls back to, and broadcasts to the others."""

import copy

from hvdlite import _core
from hvdlite.exceptions import HvdliteHostsUpdatedInterrupt

from .job import broadcast_object, expect_host_update, poll_host_update


class State:
    """Base class of elastic state: ``commit``, ``restore``, ``sync`` and reset callbacks.

    ``bcast_object(obj)`` broadcasts from rank 0 and returns the object; ``get_rank()`` gives
    this rank. Subclasses implement ``save``, ``restore`` and ``sync``.
    """

    def __init__(self, bcast_object=broadcast_object, get_rank=_core.rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []
        self._host_updates = []  # (timestamp, removed) from on_hosts_updated, oldest first

    def register_reset_callbacks(self, callbacks):
        """Functions called (no arguments) after every reset, e.g. to scale the LR by size()."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self._host_updates = []
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, removed=False):
        """Record that the set of hosts changed; the next commit/check_host_updates acts on it."""
        self._host_updates.append((timestamp, bool(removed)))

    def commit(self):
        """Save the state (the point a failure rolls back to), then check for host updates."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Raise HostsUpdatedInterrupt on every rank when the job's hosts changed.

        Collective. Rank 0 reads hvdlite-run's latest host list (from
        ``--host-discovery-script``) and plans the change, or takes what
        ``on_hosts_updated`` recorded; its view is broadcast, so every rank raises or none
        does. ``hvdlite.elastic.run`` then applies the change: ranks on removed hosts leave,
        new ranks start on added slots and receive the state by ``sync()``.
        """
        if _core.rank() == 0:
            recorded = self._host_updates[-1] if self._host_updates else None
            mine = (poll_host_update(), recorded)
        else:
            mine = None
        change, recorded = self._bcast_object(mine) if _core.size() > 1 else mine
        self._host_updates = []
        if change is not None:
            expect_host_update(change)
            # Only removed: every rank that stays holds the committed state already.
            raise HvdliteHostsUpdatedInterrupt(skip_sync=not change.added)
        if recorded is not None:
            _, removed = recorded
            raise HvdliteHostsUpdatedInterrupt(skip_sync=removed)

    def save(self):
        raise NotImplementedError

    def restore(self):
        raise NotImplementedError

    def sync(self):
        raise NotImplementedError

    def reset(self):
        """Called after hvdlite was rebuilt, before the reset callbacks."""


class ObjectState(State):
    """State made of picklable attributes: ``ObjectState(epoch=0, batch=0)``.

    ``commit`` keeps a deep copy of every attribute, ``restore`` puts it back, ``sync``
    broadcasts the committed values from rank 0.
    """

    def __init__(self, bcast_object=broadcast_object, get_rank=_core.rank, **kwargs):
        self._saved_state = copy.deepcopy(kwargs)
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {k: copy.deepcopy(getattr(self, k)) for k in self._saved_state}

    def restore(self):
        self._set_attrs()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attrs()

    def _set_attrs(self):
        for k, v in self._saved_state.items():
            setattr(self, k, copy.deepcopy(v))
