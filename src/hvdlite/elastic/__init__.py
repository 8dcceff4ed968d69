"""Elastic training: survive a lost rank without restarting the job (Horovod's elastic API).

::

    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            ...
            state.commit()

When a rank dies, every survivor's pending collective raises :class:`HvdliteRanksLostError`;
``run`` rolls the state back to the last ``commit()``, rebuilds hvdlite over the survivors
(MPI's ULFM: revoke, shrink, agree), broadcasts the state from the lowest surviving rank,
runs the reset callbacks and calls the function again. Needs an MPI with ULFM (Open MPI 5)
and a job launched elastic (``hvdlite-run --min-np N``); see docs/elastic.md.
"""

from hvdlite.contract import elastic_env as settings, membership  # noqa: F401 - old homes
from hvdlite.exceptions import (HorovodInternalError, HostsUpdatedInterrupt,
                                HvdliteHostsUpdatedInterrupt, HvdliteInternalError,
                                HvdliteRanksLostError)

from .run import run, run_fn
from .state import ObjectState, State

__all__ = ["run", "run_fn", "State", "ObjectState", "HvdliteInternalError",
           "HvdliteRanksLostError", "HvdliteHostsUpdatedInterrupt", "HorovodInternalError",
           "HostsUpdatedInterrupt"]
