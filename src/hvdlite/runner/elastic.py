"""Elastic jobs for ``hvdlite-run`` (``--min-np``, ``--max-np``, ``--host-discovery-script``).

An elastic job survives lost ranks: mpirun runs with MPI's fault tolerance (ULFM, Open MPI 5:
``--with-ft ulfm``), the ranks' guards report a rank that failed as killed (so the runtime
tells the survivors instead of ending the job), hvdlite inside the survivors shrinks to them
(:mod:`hvdlite.elastic`), and hvdlite-run prints each loss and ends the job only when the
survivors finish, or when fewer than ``--min-np`` are left.

With ``--host-discovery-script`` the launcher runs the script every
DISCOVERY_INTERVAL_SECONDS and writes what it lists to a file the ranks read at
``commit()`` (:class:`HostWatcher`); the ranks then remove or add ranks themselves
(:mod:`hvdlite.elastic.run`), and the launcher prints each rank that joins or leaves.
"""

import json
import os
import subprocess
import sys
import threading
from typing import Callable, List, Optional, Tuple

from hvdlite.contract import membership
from hvdlite.contract.elastic_env import (COMMAND_ENV, ELASTIC_ENV, HOSTS_FILE_ENV, MAX_NP_ENV,
                                          MIN_NP_ENV)
from .hosts import HostError, parse_host_list

DISCOVERY_TIMEOUT_SECONDS = 30
DISCOVERY_INTERVAL_SECONDS = 1.0


class ElasticError(Exception):
    """A bad elastic setting (shown as a usage error)."""


def is_elastic(args) -> bool:
    return (args.min_np is not None or args.max_np is not None
            or args.host_discovery_script is not None)


def discover_hosts(script: str) -> List[Tuple[str, Optional[int]]]:
    """Run the discovery script once: one ``host[:slots]`` per line, as Horovod's."""
    try:
        proc = subprocess.run([script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              stdin=subprocess.DEVNULL, text=True,
                              timeout=DISCOVERY_TIMEOUT_SECONDS)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ElasticError(f"--host-discovery-script {script}: cannot run it: {e}")
    if proc.returncode != 0:
        raise ElasticError(f"--host-discovery-script {script} exited with code "
                           f"{proc.returncode}: {proc.stderr.strip()[:300]}")
    lines = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    if not lines:
        raise ElasticError(f"--host-discovery-script {script} listed no hosts")
    try:
        return parse_host_list(",".join(lines))
    except HostError as e:
        raise ElasticError(f"--host-discovery-script {script}: {e}")


def check_settings(args, fault_tolerance_flags: Optional[List[str]], mpi_name: str,
                   hvdlite_fault_tolerant: bool, why_none: str = "") -> None:
    """Validate the elastic flags against -np and the MPI; raise ElasticError. ``why_none``:
    why this MPI has no fault tolerance, where users may expect it."""
    min_np = args.min_np if args.min_np is not None else 1
    if args.max_np is not None and args.max_np < min_np:
        raise ElasticError(f"--max-np {args.max_np} is below --min-np {min_np}")
    if args.np < min_np:
        raise ElasticError(f"-np {args.np} is below --min-np {min_np}")
    if args.max_np is not None and args.np > args.max_np:
        raise ElasticError(f"-np {args.np} is above --max-np {args.max_np}")
    if fault_tolerance_flags is None:
        raise ElasticError(f"elastic jobs (--min-np/--max-np) need an MPI with the ULFM "
                           f"fault-tolerance extension (Open MPI 5); {mpi_name} has none"
                           + (f" ({why_none})" if why_none else "")
                           + ", so a lost rank would end the job. Run without --min-np/--max-np")
    if not hvdlite_fault_tolerant:
        raise ElasticError("elastic jobs need hvdlite built against an MPI with ULFM "
                           "(Open MPI 5); this build has no fault tolerance")


def environment(args, hosts_file: Optional[str] = None,
                command: Optional[List[str]] = None) -> dict:
    """HVDLITE_* variables that tell the ranks their job is elastic; with a hosts file (a
    discovery script), also how to start new ranks."""
    env = {ELASTIC_ENV: "1", MIN_NP_ENV: str(args.min_np if args.min_np is not None else 1)}
    if args.max_np is not None:
        env[MAX_NP_ENV] = str(args.max_np)
    if hosts_file is not None:
        env[HOSTS_FILE_ENV] = hosts_file
        env[COMMAND_ENV] = json.dumps(command or [])
    return env


def with_slots(found, script: str) -> List[Tuple[str, int]]:
    missing = [h for h, s in found if s is None]
    if missing:
        raise ElasticError(f"--host-discovery-script {script}: give every host its slots "
                           f"(host:slots); {', '.join(missing)} has none")
    return [(h, int(s)) for h, s in found]


class HostWatcher:
    """Runs the discovery script every ``interval`` seconds and keeps the ranks' hosts file
    (see :mod:`hvdlite.contract.membership`) up to date; ``write`` shows each change."""

    def __init__(self, script: str, path: str, np: int, hosts, write: Callable[[str], None],
                 interval: float = DISCOVERY_INTERVAL_SECONDS):
        self.script, self.path, self.interval, self._write = script, path, interval, write
        hosts = with_slots(hosts, script)
        self.current = membership.HostsFile(0, hosts, np, hosts)
        membership.write_hosts(path, self.current)
        self._stop = threading.Event()
        self._failed = None
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self):
        self._thread.start()

    def stop(self):
        self._stop.set()

    def poll(self) -> bool:
        """Run the script once; True when the hosts changed (and the file was rewritten)."""
        try:
            hosts = with_slots(discover_hosts(self.script), self.script)
        except ElasticError as e:
            if str(e) != self._failed:   # say it once; the ranks keep the last hosts
                self._failed = str(e)
                self._write(f"warning: {e}; keeping the hosts found before")
            return False
        self._failed = None
        if hosts == self.current.hosts:
            return False
        old = self.current.hosts
        self.current = self.current._replace(version=self.current.version + 1, hosts=hosts)
        membership.write_hosts(self.path, self.current)
        show = lambda hs: ",".join(f"{h}:{s}" for h, s in hs)  # noqa: E731
        self._write(f"hosts changed: {show(hosts)} (was {show(old)})")
        return True

    def _loop(self):
        while not self._stop.wait(self.interval):
            self.poll()


class Membership:
    """Counts the live ranks of an elastic job from the guards' exit reports.

    ``on_lost(rank, how)`` is called with the launcher's description of each failure; it
    prints the change and, when fewer than ``min_np`` ranks are left, calls ``end_job`` with
    the error to show.
    """

    def __init__(self, np: int, min_np: int, write: Callable[[str], None],
                 end_job: Callable[[str], None]):
        self.live = np
        self.min_np = min_np
        self.lost: List[int] = []
        self.left: List[int] = []   # ranks whose host was removed (they exited cleanly)
        self._write = write
        self._end_job = end_job
        self._lock = threading.Lock()

    def on_joined(self, rank: int) -> None:
        with self._lock:
            self.live += 1
            live = self.live
        self._write(f"rank {rank} joined; continuing with {live} rank{'s' if live != 1 else ''}")

    def on_left(self, rank: int) -> None:
        with self._lock:
            self.live -= 1
            self.left.append(rank)
            live = self.live
        self._write(f"rank {rank} left (its host was removed); continuing with {live} "
                    f"rank{'s' if live != 1 else ''}")

    def on_lost(self, rank: int, how: str) -> None:
        with self._lock:
            self.live -= 1
            self.lost.append(rank)
            live, lost = self.live, list(self.lost)
        if live >= self.min_np:
            self._write(f"rank {rank} lost ({how}); continuing with {live} "
                        f"rank{'s' if live != 1 else ''}")
            return
        names = ", ".join(str(r) for r in lost)
        self._end_job(f"rank {rank} lost ({how}); {live} rank{'s' if live != 1 else ''} left "
                      f"(lost: rank{'s' if len(lost) > 1 else ''} {names}), fewer than "
                      f"--min-np {self.min_np}; the job was ended")
