"""Host lists (``-H a:2,b:2``) and hostfiles: parsing, validation, and an ssh check.

Both inputs give ``(host, slots)`` pairs; slots is None where a hostfile line names a host
without a count (the MPI then decides). Every mistake is a :class:`HostError` with one line
that names the entry (and the file line).
"""

import concurrent.futures
import re
import subprocess
from typing import List, Optional, Sequence, Tuple

from hvdlite.contract.membership import is_local

Hosts = List[Tuple[str, Optional[int]]]

_HOST_NAME = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+$")


class HostError(Exception):
    pass


def _slots(text: str, where: str) -> int:
    if not text.isdigit():
        raise HostError(f"{where}: the slot count must be a whole number, got {text!r}")
    if int(text) < 1:
        raise HostError(f"{where}: the slot count must be at least 1, got {text}")
    return int(text)


def _check_name(host: str, where: str) -> None:
    if not host or not _HOST_NAME.match(host):
        raise HostError(f"{where}: {host!r} is not a host name")


def _no_duplicates(hosts: Sequence[Tuple[str, Optional[int], str]]) -> Hosts:
    seen = {}
    for host, _, where in hosts:
        if host in seen:
            raise HostError(f"host {host!r} is given twice ({seen[host]} and {where}); "
                            f"give it once with the total slot count")
        seen[host] = where
    return [(h, n) for h, n, _ in hosts]


def parse_host_list(spec: str) -> Hosts:
    """'h1:4,h2:4' -> [('h1', 4), ('h2', 4)]; a host without ':N' has 1 slot (as in Open MPI)."""
    hosts = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        where = f"-H entry {item!r}"
        host, sep, slots = item.rpartition(":")
        if not sep:
            host, slots = item, "1"
        _check_name(host, where)
        hosts.append((host, _slots(slots, where), where))
    if not hosts:
        raise HostError(f"-H {spec!r} names no hosts")
    return _no_duplicates(hosts)


def parse_hostfile(path: str) -> Hosts:
    """Hosts of a hostfile in Open MPI's (``host slots=N``) or Hydra's (``host:N``) format."""
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        raise HostError(f"cannot read --hostfile {path}: {e.strerror}")
    hosts = []
    for number, raw in enumerate(lines, start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{path} line {number} ({line!r})"
        fields = line.split()
        host, slots = fields[0], None
        if ":" in host:
            host, _, count = host.rpartition(":")
            slots = _slots(count, where)
        for field in fields[1:]:
            key, sep, value = field.partition("=")
            if not sep or key not in ("slots", "max_slots", "max-slots"):
                raise HostError(f"{where}: unknown field {field!r}; expected 'host slots=N' "
                                f"or 'host:N'")
            count = _slots(value, where)
            if key == "slots":
                if slots is not None:
                    raise HostError(f"{where}: the slot count is given twice")
                slots = count
        _check_name(host, where)
        hosts.append((host, slots, where))
    if not hosts:
        raise HostError(f"--hostfile {path} names no hosts")
    return _no_duplicates(hosts)


def total_slots(hosts: Hosts) -> Optional[int]:
    """Sum of the slots, or None when some host's count is unknown."""
    if any(n is None for _, n in hosts):
        return None
    return sum(n for _, n in hosts)


def ssh_command(host: str, port: Optional[int], identity: Optional[str]) -> List[str]:
    cmd = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10"]
    if port is not None:
        cmd += ["-p", str(port)]
    if identity:
        cmd += ["-i", identity]
    return cmd + [host, "true"]


def check_ssh(hosts: Sequence[str], port: Optional[int] = None,
              identity: Optional[str] = None, timeout: float = 30) -> None:
    """Raise HostError for the first remote host that ssh cannot run a command on."""
    remote = [h for h in hosts if not is_local(h)]
    if not remote:
        return

    def probe(host: str) -> Optional[str]:
        cmd = ssh_command(host, port, identity)
        try:
            proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True, errors="replace",
                                  timeout=timeout)
        except FileNotFoundError:
            return "there is no ssh client on this machine (install openssh-client)"
        except subprocess.TimeoutExpired:
            return f"`{' '.join(cmd)}` did not finish within {timeout:g} s"
        if proc.returncode == 0:
            return None
        lines = [l.strip() for l in proc.stderr.splitlines() if l.strip()]
        reason = lines[-1] if lines else f"exit code {proc.returncode}"
        return f"`{' '.join(cmd)}` failed: {reason}"

    with concurrent.futures.ThreadPoolExecutor(max_workers=min(16, len(remote))) as pool:
        for host, problem in zip(remote, pool.map(probe, remote)):
            if problem:
                raise HostError(f"cannot reach host {host!r} over ssh: {problem}")
