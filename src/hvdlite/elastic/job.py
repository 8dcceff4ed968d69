"""This process's view of an elastic job: its membership table, the host updates it
follows, and the framework-free broadcast that shares them (used by :mod:`.run` and
:mod:`.state`)."""

import pickle

import numpy as np

from hvdlite import _core, policy, ops
from hvdlite.contract import elastic_env as settings, membership
from hvdlite.object_payload import header, pickled, raise_if_any_failed


def broadcast_object(obj, root_rank=0, name=None):
    """Pickle ``obj`` on ``root_rank`` and return it on every rank (framework-free); if the
    root cannot pickle it, every rank raises (Note [object collectives agree on failure])."""
    prefix = name or policy.auto_name("elastic.broadcast_object", None)
    is_root = _core.rank() == root_rank
    payload, error = pickled(obj, pickle) if is_root else (None, None)
    head = header(root_rank, payload, error) if is_root else np.zeros(3, dtype=np.int64)
    ops.wait(ops.broadcast_async(head, root_rank, name=f"{prefix}.len"))
    payload = payload.copy() if is_root else np.empty(int(head[0]), dtype=np.uint8)
    ops.wait(ops.broadcast_async(payload, root_rank, name=f"{prefix}.data"))
    raise_if_any_failed(f"broadcast_object '{prefix}'", [head], [payload], error)
    if is_root:
        return obj
    return pickle.loads(payload.tobytes())


class Job:
    """This process's view of the job's membership (the same on every rank)."""
    members = None        # [membership.Member] in rank order; None until known
    next_worker = 0       # the launcher's number for the next rank added
    seen_version = 0      # the hosts file's version the membership follows
    pending = None        # the membership.Plan a host update raised an interrupt for


job = Job()


def member_table():
    """The membership table. The first time: from the launcher's hosts file, or, in a job
    without one, the ranks as they are (nothing has changed yet, or the table would exist)."""
    if job.members is None:
        found = membership.read_hosts()
        if found is not None:
            job.members = membership.initial_members(found.np, found.initial_hosts)
            job.next_worker = found.np
        else:
            job.members = [membership.Member(r, "") for r in range(_core.size())]
            job.next_worker = _core.size()
    return job.members


def poll_host_update():
    """On the planning rank: the change the launcher's latest host list asks, or None."""
    members = member_table()
    found = membership.read_hosts()
    if members is None or found is None or found.version == job.seen_version:
        return None
    job.seen_version = found.version
    return membership.plan(members, found.hosts, settings.max_np(), job.next_worker,
                           found.version)


def expect_host_update(change):
    """Every rank: the interrupt about to be raised asks for ``change`` (see _reset)."""
    job.pending = change
    job.seen_version = change.hosts_version


def share_table():
    """Rank 0's membership table reaches every rank (the new ones know nothing yet)."""
    table = (job.members, job.next_worker, job.seen_version) if _core.rank() == 0 else None
    members, job.next_worker, job.seen_version = broadcast_object(
        table, root_rank=0, name="hvdlite.elastic.membership")
    job.members = [membership.Member(*m) for m in members]
