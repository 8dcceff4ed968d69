"""Runs one rank's program for ``hvdlite-run``: ``python -m hvdlite.runner.rank_guard CMD...``.

mpirun starts this guard in place of the program; the guard starts the program (same stdin,
stdout, stderr and environment) and stays its parent, so that:

* the rank never outlives its job: the program gets SIGKILL when the guard dies (a
  parent-death signal), and the guard stops the program when its own parent (mpirun or the
  MPI daemon) is gone, for example after hvdlite-run was SIGKILLed;
* Open MPI's shared-memory segment of the program does not outlive it in /dev/shm, also when
  hvdlite-run was SIGKILLed (Note [the segment janitor]);
* hvdlite-run learns when and how each rank ended: the guard writes one line,
  ``<marker> rank=R code=C signal=S time=T``, to the rank's stderr when the program exits,
  which hvdlite-run consumes (and never shows). This names the rank that left first, also
  when it exited cleanly while the others still waited for it.

A rank that an elastic job adds (MPI_Comm_spawn; HVDLITE_ELASTIC_WORKER_ID set) is not
rank-tagged by mpirun: its guard tags the program's lines itself, as Open MPI 5 does
(``[2,K]<stdout>: ``, K the launcher's number for the rank), and first writes
``<start marker> rank=K``.

Signals the guard receives (SIGTERM from mpirun, SIGINT, ...) are passed on to the program.
The guard exits as the program did (same code, or killed by the same signal), except in an
elastic job (HVDLITE_ELASTIC=1), where a program that exits with an error status makes the
guard end by SIGKILL: Open MPI's fault-tolerant runtime ends the whole job when a rank exits
with an error status, but reports a killed rank to the survivors as a lost process.
"""

import os
import signal
import sys
import threading
import time

# This file runs as a script, without hvdlite on the path: these must equal
# hvdlite.contract.markers.EXIT_MARKER / START_MARKER and
# hvdlite.contract.elastic_env.WORKER_ID_ENV (tests/unit/test_markers.py checks it).
EXIT_MARKER = "hvdlite-run-rank-exit:"
START_MARKER = "hvdlite-run-rank-start:"   # an elastic job added this rank
ADDED_ID_ENV = "HVDLITE_ELASTIC_WORKER_ID"

GUARDED_ENV = "HVDLITE_RANK_GUARD"   # set to "1" for the program a guard runs
PARENT_POLL_SECONDS = 0.5
KILL_GRACE_SECONDS = 3.0
_FORWARDED = ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGCONT")


def _rank() -> str:
    for name in (ADDED_ID_ENV, "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "MPI_LOCALRANKID"):
        if os.environ.get(name, "").isdigit():
            return os.environ[name]
    return "?"


def _parent_death_signal(sig: int) -> None:
    try:
        import ctypes
        PR_SET_PDEATHSIG = 1
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except Exception:   # not Linux: the parent poll below still applies
        pass


class _Tagger:
    """Tags an added rank's output lines as Open MPI 5's ``--output tag`` does."""

    TAIL_SECONDS = 5.0   # how long to wait for output left in the pipes after the exit

    def __init__(self, worker: int):
        self.worker = worker
        self.pipes = {1: os.pipe(), 2: os.pipe()}
        self.threads = []
        os.write(2, self.prefix(b"stderr") + f"{START_MARKER} rank={worker}\n".encode())

    def prefix(self, stream: bytes) -> bytes:
        return b"[2,%d]<%s>: " % (self.worker, stream)

    def connect_child(self):
        for fd, (r, w) in self.pipes.items():
            os.dup2(w, fd)
            os.close(r)
            os.close(w)

    def start(self):
        for fd, (r, w) in self.pipes.items():
            os.close(w)
            t = threading.Thread(target=self._copy, args=(r, fd), daemon=True)
            t.start()
            self.threads.append(t)

    def _copy(self, r: int, fd: int):
        head = self.prefix(b"stdout" if fd == 1 else b"stderr")
        with os.fdopen(r, "rb", buffering=0) as src:
            pending = b""
            while True:
                chunk = src.read(65536)
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                if lines:
                    _write_all(fd, b"".join(head + line + b"\n" for line in lines))
            if pending:
                _write_all(fd, head + pending + b"\n")

    def finish(self):
        for t in self.threads:
            t.join(self.TAIL_SECONDS)


SEGMENT_PREFIX = "/dev/shm/sm_segment."
SEGMENT_POLL_SECONDS = 0.5


def _own_segment(pid: int, local_rank: str):
    """The path of Open MPI's shared-memory segment that process `pid` created
    (``sm_segment.<host>.<uid>.<job>.<local rank>``; its peers map it too), once mapped."""
    try:
        with open(f"/proc/{pid}/maps") as maps:
            for line in maps:
                fields = line.split(maxsplit=5)
                path = fields[5].strip() if len(fields) == 6 else ""
                if path.startswith(SEGMENT_PREFIX) and path.rsplit(".", 1)[-1] == local_rank:
                    return path
    except OSError:
        pass
    return None


def _start_time(pid: int):
    """`pid`'s start time (so a reused pid is not taken for it), or None once it has exited
    (a zombie has exited too)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return None if fields[0] == "Z" else fields[19]
    except (OSError, IndexError):
        return None


def _start_segment_janitor(pid: int) -> None:
    """Note [the segment janitor]
    Open MPI removes its shared-memory segments (48 MiB a job) when a job ends in order; when
    hvdlite-run is SIGKILLed, mpirun takes the ranks and their guards down with it, and the
    files stay in /dev/shm. So a small process in a session of its own (outside the job's
    process tree and its signals) finds the program's own segment and removes it once the
    program is gone: no one needs it then (its peers have mapped it already, and ranks added
    later never connect to a rank that has gone)."""
    local_rank = os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "")
    if not local_rank.isdigit() or not os.path.isdir("/dev/shm"):
        return
    if os.fork() != 0:
        return
    try:   # the janitor: detached from the job's session, its outputs and its files
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.closerange(3, 65536)
        started, path = _start_time(pid), None
        while started is not None and _start_time(pid) == started:
            path = path or _own_segment(pid, local_rank)
            time.sleep(SEGMENT_POLL_SECONDS)
        if path and os.stat(path).st_uid == os.geteuid():
            os.unlink(path)
    except BaseException:   # nothing to report to: the job has gone
        pass
    os._exit(0)


def _write_all(fd: int, data: bytes):
    try:
        while data:
            data = data[os.write(fd, data):]
    except OSError:
        pass


def main(argv) -> int:
    if not argv:
        sys.stderr.write("usage: python -m hvdlite.runner.rank_guard PROGRAM [ARGS...]\n")
        return 2
    parent = os.getppid()
    _parent_death_signal(signal.SIGTERM)   # our parent dies -> we stop the program
    if os.getppid() != parent:              # it died before the line above
        return 128 + signal.SIGTERM
    sys.stdout.flush()
    os.environ[GUARDED_ENV] = "1"
    tag = os.environ.get(ADDED_ID_ENV, "")
    tagging = _Tagger(int(tag)) if tag.isdigit() else None
    pid = os.fork()
    if pid == 0:   # the program
        try:
            if tagging is not None:
                tagging.connect_child()
            for name in ("SIGPIPE", "SIGXFSZ"):   # Python ignores these; the program must not
                if hasattr(signal, name):
                    signal.signal(getattr(signal, name), signal.SIG_DFL)
            _parent_death_signal(signal.SIGKILL)
            if os.getppid() != parent and os.getppid() == 1:
                os._exit(128 + signal.SIGKILL)
            os.execvp(argv[0], argv)
        except OSError as e:
            os.write(2, f"hvdlite-run: cannot start {argv[0]!r}: {e.strerror}\n".encode())
            os._exit(127)
    _start_segment_janitor(pid)   # before the tagger's threads: a fork copies only this one
    if tagging is not None:
        tagging.start()
    stopping = threading.Event()

    def forward(signum, frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass
        if signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            stopping.set()

    for name in _FORWARDED:
        signal.signal(getattr(signal, name), forward)

    def watch_parent():
        # The launcher (or the MPI daemon on this host) is gone: stop the program.
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_SECONDS)
        try:
            os.kill(pid, signal.SIGTERM)
            time.sleep(KILL_GRACE_SECONDS)
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    threading.Thread(target=watch_parent, daemon=True).start()
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)   # -S when killed by signal S
    line = (f"{EXIT_MARKER} rank={_rank()} code={max(code, 0)} "
            f"signal={-code if code < 0 else 0} time={time.time():.6f}\n")
    if tagging is not None:
        tagging.finish()
        line = tagging.prefix(b"stderr").decode() + line
    try:
        os.write(2, line.encode())
    except OSError:
        pass
    if code > 0 and os.environ.get("HVDLITE_ELASTIC") == "1":
        code = -signal.SIGKILL
    if code < 0:
        if -code != signal.SIGKILL:   # SIGKILL's handler cannot be set (nor caught)
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        return 128 - code
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
