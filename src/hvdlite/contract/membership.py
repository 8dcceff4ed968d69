"""Where the ranks of an elastic job are, and what a new host list asks of them.

hvdlite-run polls ``--host-discovery-script`` and writes what it lists to a file (see
:mod:`.elastic_env`); at ``commit()`` / ``check_host_updates()`` rank 0 reads it and, when it
changed, plans the change: ranks on hosts no longer listed (or beyond a host's slots) leave,
and new ranks fill the free slots up to ``--max-np``. Every rank keeps the same table of
(launcher's rank number, host) in rank order, so that any of them can plan after rank 0 is
lost.
"""

import json
import os
import socket
from typing import List, NamedTuple, Optional, Sequence, Tuple

from . import elastic_env as settings

Hosts = List[Tuple[str, int]]

_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1", "localhost.localdomain"}


def is_local(host: str) -> bool:
    if host in _LOCAL_NAMES:
        return True
    try:
        return host in {socket.gethostname(), socket.getfqdn()}
    except OSError:
        return False


class Member(NamedTuple):
    worker: int   # the launcher's number for the rank (stays with the process)
    host: str     # its host's name as the discovery script lists it


class Plan(NamedTuple):
    leaving: List[int]          # ranks (current numbering) that leave
    added: List[Member]         # new ranks, appended after those that stay
    hosts_version: int


class HostsFile(NamedTuple):
    version: int          # 0 at the start, one more at every change
    hosts: Hosts          # what the discovery script lists now
    np: int               # the job's first size (-np)
    initial_hosts: Hosts  # what it listed at the start (where the first ranks are)


def read_hosts(path: Optional[str] = None) -> Optional[HostsFile]:
    """hvdlite-run's hosts file; None in a job without one (no discovery script)."""
    path = path or settings.hosts_file()
    if not path:
        return None
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None   # not written yet: read again at the next commit
    pairs = lambda key: [(str(h), int(s)) for h, s in data[key]]  # noqa: E731
    return HostsFile(int(data["version"]), pairs("hosts"), int(data["np"]),
                     pairs("initial_hosts"))


def write_hosts(path: str, content: HostsFile) -> None:
    """Replace the hosts file at once (a reader never sees half of it)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump({"version": content.version, "hosts": content.hosts, "np": content.np,
                   "initial_hosts": content.initial_hosts}, f)
    os.replace(tmp, path)


def initial_members(np: int, hosts: Hosts) -> List[Member]:
    """The job's first ranks, placed by slot as mpirun places them for ``-H``."""
    members = []
    for host, slots in hosts:
        for _ in range(slots):
            if len(members) < np:
                members.append(Member(len(members), host))
    while len(members) < np:   # oversubscribed: mpirun wraps around the hosts
        members.append(Member(len(members), hosts[len(members) % len(hosts)][0]))
    return members


def plan(members: Sequence[Member], hosts: Hosts, max_np: Optional[int], next_worker: int,
         version: int) -> Optional[Plan]:
    """What the new host list asks: ranks beyond their host's slots (or on a host no longer
    listed) leave, the lowest ranks of a host staying; then new ranks fill free slots, host by
    host, up to max_np. None when nothing changes."""
    slots = dict(hosts)
    used = {h: 0 for h, _ in hosts}
    leaving = []
    for rank, m in enumerate(members):
        if used.get(m.host, 0) < slots.get(m.host, 0):
            used[m.host] += 1
        else:
            leaving.append(rank)
    size = len(members) - len(leaving)
    room = sum(slots.values()) - size
    if max_np is not None:
        room = min(room, max_np - size)
    added = []
    for host, n in hosts:
        while room > 0 and used[host] < n:
            added.append(Member(next_worker + len(added), host))
            used[host] += 1
            room -= 1
    if not leaving and not added:
        return None
    return Plan(leaving, added, version)


def apply(members: Sequence[Member], change: Plan) -> List[Member]:
    return [m for r, m in enumerate(members) if r not in change.leaving] + list(change.added)


def without(members: Sequence[Member], lost: Sequence[int]) -> List[Member]:
    return [m for r, m in enumerate(members) if r not in set(lost)]
