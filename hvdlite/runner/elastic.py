"""Elastic jobs for ``hvdlite-run`` (``--min-np``, ``--max-np``, ``--host-discovery-script``).

An elastic job survives lost ranks: mpirun runs with MPI's fault tolerance (ULFM, Open MPI 5:
``--with-ft ulfm``), the ranks' guards report a rank that failed as killed (so the runtime
tells the survivors instead of ending the job), hvdlite inside the survivors shrinks to them
(:mod:`hvdlite.elastic`), and hvdlite-run prints each loss and ends the job only when the
survivors finish, or when fewer than ``--min-np`` are left.
"""

import os
import subprocess
import sys
import threading
from typing import Callable, List, Optional, Tuple

from ..elastic.settings import ELASTIC_ENV, MIN_NP_ENV
from .hosts import HostError, parse_host_list

DISCOVERY_TIMEOUT_SECONDS = 30


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
                   hvdlite_fault_tolerant: bool) -> None:
    """Validate the elastic flags against -np and the MPI; raise ElasticError."""
    min_np = args.min_np if args.min_np is not None else 1
    if args.max_np is not None and args.max_np < min_np:
        raise ElasticError(f"--max-np {args.max_np} is below --min-np {min_np}")
    if args.np < min_np:
        raise ElasticError(f"-np {args.np} is below --min-np {min_np}")
    if args.max_np is not None and args.np > args.max_np:
        raise ElasticError(f"-np {args.np} is above --max-np {args.max_np}")
    if fault_tolerance_flags is None:
        raise ElasticError(f"elastic jobs (--min-np/--max-np) need an MPI with the ULFM "
                           f"fault-tolerance extension (Open MPI 5); {mpi_name} has none, so a "
                           f"lost rank would end the job. Run without --min-np/--max-np")
    if not hvdlite_fault_tolerant:
        raise ElasticError("elastic jobs need hvdlite built against an MPI with ULFM "
                           "(Open MPI 5); this build has no fault tolerance")


def environment(args) -> dict:
    """HVDLITE_* variables that tell the ranks their job is elastic."""
    return {ELASTIC_ENV: "1", MIN_NP_ENV: str(args.min_np if args.min_np is not None else 1)}


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
        self._write = write
        self._end_job = end_job
        self._lock = threading.Lock()

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
