"""Launch a worker script under mpirun with a hard timeout; used by every multi-process test.

The mpirun is the one beside the MPI library hvdlite loads (``hvdlite.mpi_library``), spoken to
in its own dialect (Open MPI 4/5, MPICH, Intel MPI; ``hvdlite.runner.dialect``), so the suite
runs unchanged on any of them. A hang fails
the test after ``timeout`` seconds (``timeout`` kills mpirun and its ranks) instead of
eating CI's time.
"""
import functools
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_TIMEOUT = 300

if REPO not in sys.path:   # for tests.* helpers; hvdlite itself is the installed package
    sys.path.insert(0, REPO)


@functools.lru_cache(maxsize=None)
def mpi():
    """(mpirun path, its dialect) for the MPI library hvdlite loads."""
    from hvdlite.runner import launch
    info, why = launch._mpi_info()
    if why:
        raise RuntimeError(why)
    mpirun, _ = launch.find_mpirun(None, info)
    dialect = launch.choose_dialect(mpirun, info, mpi_args="")
    return mpirun, dialect


def mpi_env(extra=None):
    env = dict(os.environ)
    _, dialect = mpi()
    if os.geteuid() == 0:
        env.update(dialect.root_env())
    env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    env.setdefault("PYTHONPATH", "")
    env["PYTHONPATH"] = HERE + os.pathsep + REPO + os.pathsep + env["PYTHONPATH"]
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    return env


def mpirun_path():
    return mpi()[0]


def mpi_command(np, argv):
    """mpirun argv that runs ``argv`` at ``np`` ranks on this machine (any core count)."""
    mpirun, dialect = mpi()
    return [mpirun, "-np", str(np), *dialect.oversubscribe(), *dialect.no_binding(), *argv]


# Note [mpirun that never started]
# Open MPI 5's mpirun very rarely fails to start its own PMIx server ("listener thread failed
# to start"; CI saw it once in ~400 launches). No rank has run then, so nothing the test checks
# has happened yet: the launch is tried once more, and only for these messages.
_MPI_START_FAILURES = (
    "The PMIx server's listener thread failed to start",
    "was unable to reliably start one or more daemons",
)


def mpi_never_started(output):
    """True if ``output`` shows that mpirun itself failed to start (Note [mpirun that never
    started])."""
    return any(message in output for message in _MPI_START_FAILURES)


def run_once_more_if_mpi_never_started(launch):
    """``launch()`` returns (CompletedProcess, output text); run it again once if the first
    try's mpirun never started."""
    proc, output = launch()
    if proc.returncode != 0 and mpi_never_started(output):
        print("mpirun failed to start; launching once more:\n" + output[-2000:])
        proc, output = launch()
    return proc


def run_mpi(np, script, *args, env=None, timeout=DEFAULT_TIMEOUT, check=True):
    """Run ``python script args`` at ``np`` ranks; return CompletedProcess (stdout+stderr text).

    With ``check`` the test fails (showing the ranks' output) unless every rank exits 0.
    """
    script = script if os.path.isabs(script) else os.path.join(HERE, script)
    cmd = ["timeout", "--kill-after=10", str(timeout),
           *mpi_command(np, [sys.executable, script, *map(str, args)])]

    def launch():
        proc = subprocess.run(cmd, env=mpi_env(env), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        return proc, proc.stdout
    proc = run_once_more_if_mpi_never_started(launch)
    if check and proc.returncode != 0:
        raise AssertionError(
            failure_summary(proc.stdout)
            + f"{' '.join(cmd)} exited with {proc.returncode}"
            + (" (timed out)" if proc.returncode in (124, 137) else "")
            + f"\n--- output ---\n{proc.stdout[-20000:]}")
    return proc


_RANK_PREFIX = re.compile(r"^(\[[^\]]*\]<?\w*>?:?\s?)")
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_RAISED = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt))(: .*)?$")


def failure_summary(output):
    """The failing assertions of a multi-process run, first: for every traceback in the ranks'
    output, the exception line after the test-script frames it passed through
    (``workers/x.py:42 > workers/worker_checks.py:21: AssertionError: [rank 1] ...``), each
    once. Empty if none is found."""
    found, frames = [], []
    for raw in output.splitlines():
        line = _RANK_PREFIX.sub("", raw)
        frame = _FRAME.search(line)
        if frame and os.path.abspath(frame.group(1)).startswith(HERE + os.sep):
            frames.append(f"{os.path.relpath(frame.group(1), HERE)}:{frame.group(2)}")
        elif _RAISED.match(line) and not line.startswith(" "):
            entry = f"{' > '.join(frames)}: {line}" if frames else line
            if entry not in found:
                found.append(entry)
            frames = []
    if not found:
        return ""
    return "failed: " + "\n        ".join(found[:8]) + "\n"
