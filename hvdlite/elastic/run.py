"""The ``run`` decorator: retry the training function after a lost rank or a host update."""

import functools
import sys
import time

from hvdlite import _core, _policy, process_sets
from hvdlite.exceptions import (HvdliteHostsUpdatedInterrupt, HvdliteInternalError,
                                HvdliteInvalidArgumentError)

from . import settings

# Ranks lost so far, each in the numbering it had when it was lost.
_lost_history = []


class HvdliteTooFewRanksError(HvdliteInternalError):
    """Fewer than --min-np ranks are left after a failure; the job cannot go on."""


def _rebuild():
    """Shrink hvdlite to the surviving ranks (collective over the survivors)."""
    if not _core.build_info()["fault_tolerant"]:
        raise HvdliteInvalidArgumentError(
            "hvdlite.elastic: this hvdlite was built against an MPI without ULFM "
            f"({_core.build_info()['mpi_library_version'].splitlines()[0]}); a lost rank cannot "
            "be survived. Use Open MPI 5 (launched by hvdlite-run --min-np, which adds "
            "--with-ft ulfm).")
    before = _core.size()
    started = time.perf_counter()
    lost = _core.rebuild()
    process_sets._refresh_after_rebuild()
    _policy.reset_name_counters()  # ranks may have numbered a different count of unnamed ops
    _lost_history.append(list(lost))
    after = _core.size()
    if lost and _core.rank() == 0:
        names = ", ".join(str(r) for r in lost)
        print(f"hvdlite.elastic: rebuilt over {after} rank{'s' if after != 1 else ''} without "
              f"rank{'s' if len(lost) > 1 else ''} {names} (of {before}) in "
              f"{time.perf_counter() - started:.3f} s", file=sys.stderr, flush=True)
    if after < settings.min_np():
        lost_all = "; ".join(", ".join(map(str, ls)) for ls in _lost_history if ls)
        raise HvdliteTooFewRanksError(
            f"hvdlite.elastic: {after} rank{'s' if after != 1 else ''} left after losing "
            f"rank(s) {lost_all} (each numbered as when it was lost), fewer than --min-np "
            f"{settings.min_np()}; ending the job")


def run_fn(func, reset):
    """Wrap ``func(state, ...)`` so it is retried after a failure, as Horovod's ``run_fn``."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except HvdliteTooFewRanksError:
                raise
            except HvdliteInternalError:
                # Roll back first: nothing since the last commit may be applied twice.
                state.restore()
                skip_sync = False
            except HvdliteHostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            reset()
            state.on_reset()

    return wrapper


def run(func):
    """Decorator: run ``func(state, ...)`` elastically (see :mod:`hvdlite.elastic`)."""
    return run_fn(func, _rebuild)
