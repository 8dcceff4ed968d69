"""The ``run`` decorator: retry the training function after a lost rank or a host update."""

import functools
import os
import sys
import time

from hvdlite import _core, mpi_library, policy, process_sets
from hvdlite.exceptions import (HvdliteHostsUpdatedInterrupt, HvdliteInternalError,
                                HvdliteInvalidArgumentError)
from hvdlite.contract import elastic_env as settings, membership
from hvdlite.contract.markers import LEAVE_MARKER, LOST_MARKER

from .job import job, member_table, share_table

# Ranks lost so far, each in the numbering it had when it was lost.
_lost_history = []


class HvdliteTooFewRanksError(HvdliteInternalError):
    """Fewer than --min-np ranks are left after a failure; the job cannot go on."""


def _say(text):
    if _core.rank() == 0:
        print(f"hvdlite.elastic: {text}", file=sys.stderr, flush=True)


def _check_fault_tolerant():
    mpi = mpi_library.load()
    if not mpi["fault_tolerant"]:
        raise HvdliteInvalidArgumentError(
            "hvdlite.elastic: the MPI library loaded has no ULFM "
            f"({mpi['library']}: {mpi['version'].splitlines()[0]}); a lost rank cannot "
            "be survived. Use Open MPI 5 (launched by hvdlite-run --min-np, which adds "
            "--with-ft ulfm).")


def _rebuild():
    """Shrink hvdlite to the surviving ranks (collective over the survivors)."""
    _check_fault_tolerant()
    before, members = _core.size(), member_table()
    started = time.perf_counter()
    lost = _core.rebuild()
    process_sets.refresh_after_rebuild()
    policy.reset_name_counters()  # ranks may have numbered a different count of unnamed ops
    _lost_history.append(list(lost))
    job.members = membership.without(members, lost)
    after = _core.size()
    if lost and _core.rank() == 0:
        # hvdlite-run counts the job's ranks to know when it is over: a lost rank's own
        # report may never come (its host vanished with its guard).
        workers = ",".join(str(members[r].worker) for r in lost)
        sys.stderr.write(f"{LOST_MARKER} ranks={workers}\n")
        sys.stderr.flush()
    if lost:
        names = ", ".join(str(r) for r in lost)
        _say(f"rebuilt over {after} rank{'s' if after != 1 else ''} without "
             f"rank{'s' if len(lost) > 1 else ''} {names} (of {before}) in "
             f"{time.perf_counter() - started:.3f} s")
    if after < settings.min_np():
        lost_all = "; ".join(", ".join(map(str, ls)) for ls in _lost_history if ls)
        raise HvdliteTooFewRanksError(
            f"hvdlite.elastic: {after} rank{'s' if after != 1 else ''} left after losing "
            f"rank(s) {lost_all} (each numbered as when it was lost), fewer than --min-np "
            f"{settings.min_np()}; ending the job")


def _environment_of(member):
    """Environment lines for a new rank: its identity. The rest it inherits from mpirun's
    runtime, which has hvdlite-run's environment (on the host hvdlite-run runs on); MPI's info
    values are too short (256 bytes) to carry more."""
    return [f"{settings.WORKER_ID_ENV}={member.worker}", f"{settings.HOST_ENV}={member.host}"]


def _regroup(change):
    """Apply a host update (collective over every rank): some leave, new ones start."""
    _check_fault_tolerant()
    before, members = _core.size(), member_table()
    after = before - len(change.leaving) + len(change.added)
    if after < settings.min_np():
        raise HvdliteTooFewRanksError(
            f"hvdlite.elastic: the discovered hosts leave room for {after} "
            f"rank{'s' if after != 1 else ''}, fewer than --min-np {settings.min_np()}; "
            "ending the job")
    command = settings.command()
    if change.added and not command:
        raise HvdliteInvalidArgumentError(
            f"hvdlite.elastic: cannot start new ranks: {settings.COMMAND_ENV} is not set "
            "(launch the job with hvdlite-run --host-discovery-script)")
    started = time.perf_counter()
    me = members[_core.rank()].worker
    leaving_workers = [members[r].worker for r in change.leaving]
    add = [(_environment_of(m), "" if membership.is_local(m.host) else m.host)
           for m in change.added]
    if not _core.regroup(list(change.leaving), list(command or []), add):
        # This rank's host was removed: tell hvdlite-run, and leave without MPI_Finalize
        # (Open MPI's finalize waits for every rank of the job).
        sys.stdout.flush()
        sys.stderr.write(f"{LEAVE_MARKER} rank={me}\n")
        sys.stderr.flush()
        os._exit(0)
    process_sets.refresh_after_rebuild()
    policy.reset_name_counters()
    job.members = membership.apply(members, change)
    job.next_worker += len(change.added)
    if change.added:
        share_table()
    parts = []
    if leaving_workers:
        parts.append("without rank" + ("s " if len(leaving_workers) > 1 else " ")
                     + ", ".join(map(str, change.leaving)))
    if change.added:
        parts.append(f"with {len(change.added)} new")
    _say(f"hosts changed: {_core.size()} ranks ({before} before, {' and '.join(parts)}) in "
         f"{time.perf_counter() - started:.3f} s")


def _reset():
    change, job.pending = job.pending, None
    if change is None:
        _rebuild()
    else:
        _regroup(change)


def _join_if_new():
    """A rank the job added receives the membership before its first sync()."""
    if job.members is None and settings.added_worker_id() is not None:
        share_table()


def run_fn(func, reset):
    """Wrap ``func(state, ...)`` so it is retried after a failure, as Horovod's ``run_fn``."""

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        _join_if_new()
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
                job.pending = None
                state.restore()
                skip_sync = False
            except HvdliteHostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
            reset()
            state.on_reset()

    return wrapper


def run(func):
    """Decorator: run ``func(state, ...)`` elastically (see :mod:`hvdlite.elastic`)."""
    return run_fn(func, _reset)
