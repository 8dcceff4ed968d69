"""Process sets: collectives among a subset of the ranks, as in Horovod.

A :class:`ProcessSet` names its members by global rank. Pass it to ``hvdlite.init(process_sets=
[...])`` or, with ``HVDLITE_DYNAMIC_PROCESS_SETS=1`` (or Horovod's
``HOROVOD_DYNAMIC_PROCESS_SETS``), to :func:`add_process_set` at any time; then give it as
``process_set=`` to any collective. Adding and removing are collective over all ranks: every
rank makes the same calls in the same order and gets the same ids. Collectives in disjoint sets
run independently; names need only be unique within a set. Roots of broadcasts stay global
ranks. ``global_process_set`` (id 0) holds every rank.
"""

import inspect
import os
from typing import List, Optional, Sequence, Union

import weakref

from . import _core, config
from .policy.names import forget_process_set


class ProcessSet:
    """A set of ranks that run collectives together. Its id is set once it has been added."""

    process_set_id: Optional[int] = None
    ranks: Optional[List[int]] = None

    def __init__(self, ranks_or_comm: Union[Sequence[int], "object"]):
        if hasattr(ranks_or_comm, "Get_group"):  # an mpi4py communicator
            ranks_or_comm = _world_ranks_of(ranks_or_comm)
        try:
            ranks = sorted(ranks_or_comm)
        except TypeError:
            raise ValueError("ProcessSet should be initialized with a list of process ranks or an "
                             f"mpi4py Comm object, not {ranks_or_comm!r}") from None
        if any(isinstance(r, bool) or not isinstance(r, int) for r in ranks):
            raise ValueError("ProcessSet should be initialized with a list of process ranks or an "
                             f"mpi4py Comm object; got {ranks_or_comm!r}")
        self.ranks = ranks

    def _invalidate(self):
        self.process_set_id = None

    def size(self) -> Optional[int]:
        """Number of ranks in the set, or None before it has been added."""
        if self.process_set_id is None:
            return None
        return _core.process_set_size(self.process_set_id)

    def rank(self) -> Optional[int]:
        """This rank's position in the set, or None before it has been added.

        Collectives still take global ranks (e.g. broadcast's root_rank), as in Horovod.
        """
        if self.process_set_id is None:
            return None
        return _core.process_set_rank(self.process_set_id)

    def included(self) -> Optional[bool]:
        """Whether this rank belongs to the set (None when the set has no ranks yet)."""
        if self.ranks is None:
            return None
        return _core.rank() in self.ranks

    def __str__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"

    __repr__ = __str__


def _world_ranks_of(comm) -> List[int]:
    from mpi4py import MPI
    return list(MPI.Group.Translate_ranks(comm.Get_group(), list(range(comm.Get_size())),
                                          MPI.COMM_WORLD.Get_group()))


# Every ProcessSet added on this rank, so an elastic rebuild can renumber their ranks.
_added = weakref.WeakSet()


def refresh_after_rebuild() -> None:
    """After an elastic rebuild: each set's surviving members, in the new numbering."""
    existing = set(_core.process_set_ids())
    for ps in list(_added):
        if ps.process_set_id in existing:
            ps.ranks = list(_core.process_set_ranks(ps.process_set_id))
        else:   # none of its members survived
            ps._invalidate()
            _added.discard(ps)


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

_dynamic = False  # set by hvdlite.init from the environment


def _dynamic_requested() -> bool:
    return bool(config.read()["dynamic_process_sets"])


def _init_process_sets(process_sets) -> None:
    """Called by hvdlite.init() once the core runs: registers the sets given to init.

    ``process_sets`` is a list of ProcessSet objects, or ``"dynamic"`` (no sets now, and
    add_process_set allowed later, as HVDLITE_DYNAMIC_PROCESS_SETS=1 does).
    """
    global _dynamic
    if isinstance(process_sets, str):
        if process_sets.lower() != "dynamic":
            raise ValueError(f"process_sets must be a list of ProcessSet objects or 'dynamic', "
                             f"not {process_sets!r}")
        os.environ["HVDLITE_DYNAMIC_PROCESS_SETS"] = "1"
        process_sets = []
    _dynamic = _dynamic_requested()
    global_process_set.ranks = _core.process_set_ranks(0)
    seen = {tuple(global_process_set.ranks)}
    for index, ps in enumerate(process_sets or []):
        if not isinstance(ps, ProcessSet):
            raise ValueError(f"process_sets entry number {index} is not a ProcessSet: {ps!r}")
        if tuple(ps.ranks) in seen:
            ps._invalidate()
            raise ValueError(f"hvdlite could not be initialized because process_sets entry number "
                             f"{index} is a duplicate: {ps}")
        seen.add(tuple(ps.ranks))
        ps.process_set_id = _core.add_process_set(ps.ranks)
        forget_process_set(ps.process_set_id)
        _added.add(ps)


def _require_dynamic(action: str) -> None:
    if not _dynamic:
        raise ValueError(f"Set HVDLITE_DYNAMIC_PROCESS_SETS=1 (or HOROVOD_DYNAMIC_PROCESS_SETS=1) "
                         f"before hvdlite.init() to allow {action} process sets after "
                         f"initialization, or pass them to hvdlite.init(process_sets=[...])")


def add_process_set(process_set: Union[ProcessSet, Sequence[int]]) -> ProcessSet:
    """Add a process set after init and return it (collective over all ranks).

    Needs HVDLITE_DYNAMIC_PROCESS_SETS=1. No set with the same ranks may exist already.
    """
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if not _core.is_initialized():
        raise ValueError("hvdlite has not been initialized; use hvdlite.init().")
    _require_dynamic("adding")
    process_set.process_set_id = _core.add_process_set(process_set.ranks)
    forget_process_set(process_set.process_set_id)   # the id may be a removed set's
    _added.add(process_set)
    return process_set


def remove_process_set(process_set: ProcessSet) -> bool:
    """Remove a process set (collective over all ranks); returns whether one was removed.

    Needs HVDLITE_DYNAMIC_PROCESS_SETS=1. The global set is never removed. Collectives still
    pending in the set fail on its members.
    """
    process_set_id = process_set.process_set_id
    if process_set_id is None or process_set_id == 0:
        return False
    if not _core.is_initialized():
        raise ValueError("hvdlite has not been initialized; use hvdlite.init().")
    _require_dynamic("removing")
    process_set._invalidate()
    return bool(_core.remove_process_set(process_set_id))


def process_set_id(process_set) -> int:
    """The core's id for a ``process_set=`` argument: a ProcessSet, an id, or None (global)."""
    if process_set is None:
        return 0
    if isinstance(process_set, ProcessSet):
        if process_set.process_set_id is None:
            raise ValueError(f"{process_set} has not been added (or was removed): pass it to "
                             f"hvdlite.init(process_sets=[...]) or hvdlite.add_process_set() first")
        return process_set.process_set_id
    if isinstance(process_set, int) and not isinstance(process_set, bool):
        return process_set
    raise ValueError(f"process_set must be a hvdlite.ProcessSet (or None for all ranks), "
                     f"not {process_set!r}")


def set_size(process_set=None) -> int:
    """The number of ranks in ``process_set`` (None: all ranks)."""
    return _core.size() if process_set is None else process_set.size()


def none_if_global(process_set):
    """None for the global set (the options beyond Horovod then name no set at all)."""
    return None if process_set is None or process_set is global_process_set or \
        process_set.process_set_id == 0 else process_set


def process_set_kwargs(fn, process_set):
    """``{"process_set": process_set}`` for ``fn`` (nothing for the default set); a clear
    error where ``fn`` cannot take one."""
    if process_set is None:
        return {}
    if "process_set" not in inspect.signature(fn).parameters:
        raise NotImplementedError(f"{fn.__module__}.{fn.__qualname__} does not take "
                                  f"process_set in this build of hvdlite")
    return {"process_set": process_set}
