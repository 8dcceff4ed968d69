"""The hvdlite process set behind a c10d group, and a group's ranks.

``new_group(ranks)`` becomes an hvdlite process set: every rank of the job calls ``new_group``
(c10d's default), and the backend's ``new_group`` hook adds the set on all of them, so the
engine needs dynamic process sets (``init_process_group`` asks for them when it starts the
engine; a job started by ``hvdlite.init()`` needs ``HVDLITE_DYNAMIC_PROCESS_SETS=1``). A set
is added once per job, or found among the engine's where the program added it already.
"""

import hvdlite
from hvdlite.exceptions import HvdliteInvalidArgumentError, HvdliteUnsupportedError
from hvdlite.process_sets import ProcessSet, add_process_set

_sets_by_ranks = {}


def process_set_for(ranks):
    """The hvdlite process set of ``ranks`` (sorted global ranks; None: every rank)."""
    if ranks == list(range(hvdlite.size())):
        return None
    key = tuple(ranks)
    if key not in _sets_by_ranks:
        core = hvdlite._core
        found = [i for i in core.process_set_ids() if list(core.process_set_ranks(i)) == ranks]
        if found:
            _sets_by_ranks[key] = ProcessSet(ranks)
            _sets_by_ranks[key].process_set_id = found[0]
        else:
            _sets_by_ranks[key] = add_process_set(ProcessSet(ranks))
    return _sets_by_ranks[key]


def known_set_for(ranks, backend):
    """The set of a group that c10d's creator makes: one ``new_group`` added on every rank
    already, which needs the default group on hvdlite too."""
    if tuple(ranks) not in _sets_by_ranks and ranks != list(range(hvdlite.size())):
        raise HvdliteUnsupportedError(
            f"new_group(ranks={ranks}, backend={backend!r}): hvdlite adds a process set on "
            f"every rank, which needs the default group on hvdlite too "
            f"(dist.init_process_group({backend!r}))")
    return process_set_for(ranks)


def forget_sets():
    """The job's sets are gone with its engine."""
    _sets_by_ranks.clear()


def check_every_rank_adds(group_name, backend):
    """c10d names a group by a hash, not a number, when only its members synchronize: the
    others never call ``new_group``, so they could not add the set."""
    if group_name and not group_name.isdigit():
        raise HvdliteUnsupportedError(
            f"new_group(use_local_synchronization=True) is not supported by the {backend} "
            f"backend: its process sets are added by every rank of the job")


def global_rank(ranks, group_rank, what):
    """The job's rank of ``group_rank`` (e.g. a root) in the group of ``ranks``."""
    if not 0 <= group_rank < len(ranks):
        raise HvdliteInvalidArgumentError(
            f"{what}: root rank {group_rank} is out of range for a group of {len(ranks)}")
    return ranks[group_rank]
