"""Tests of the hvdlite-run launcher (hvdlite/runner).

Jobs are started as ``python -m hvdlite.runner`` (the same code as the ``hvdlite-run``
console script) under ``timeout``, so a hang fails the test instead of eating CI's time.
The plain-python workers (tests/workers/launcher_*.py) need no hvdlite core; the two
hvdlite tests at the end are skipped until the core is built.
"""
import functools
import os
import signal
import subprocess
import sys
import time

import pytest

from hvdlite.runner import launch
from hvdlite.runner.output import OutputRouter

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WORKERS = os.path.join(HERE, "workers")
HARD_TIMEOUT = 120   # seconds, per launched job

pytestmark = pytest.mark.timeout(180)


@functools.lru_cache(maxsize=None)
def _needs_repo_on_path() -> bool:
    """True if hvdlite is not importable from a plain interpreter (not pip-installed)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(["timeout", "60", sys.executable, "-c", "import hvdlite.runner"],
                          cwd="/", env=env, capture_output=True)
    return proc.returncode != 0


def launcher_env(extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HVDLITE_")}
    env["OMP_NUM_THREADS"] = "1"
    if _needs_repo_on_path():
        env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    return env


def run_launcher(*args, env=None, timeout=HARD_TIMEOUT):
    """Run ``python -m hvdlite.runner args`` with a hard timeout; return (proc, seconds)."""
    cmd = ["timeout", "--kill-after=10", str(timeout), sys.executable, "-m", "hvdlite.runner",
           *map(str, args)]
    start = time.monotonic()
    proc = subprocess.run(cmd, env=launcher_env(env), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, cwd=REPO)
    elapsed = time.monotonic() - start
    assert proc.returncode not in (124, 137), (
        f"hvdlite-run timed out\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    return proc, elapsed


def worker(name):
    return os.path.join(WORKERS, name)


def show(proc):
    return f"rc={proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"


# ---------------------------------------------------------------------------------------
# runs of plain-python workers

@pytest.mark.parametrize("np_", [2, 3])
def test_ranks_get_prefixed_output(np_):
    proc, _ = run_launcher("-np", np_, sys.executable, worker("launcher_hello.py"), "a", "--flag")
    assert proc.returncode == 0, show(proc)
    out = proc.stdout.splitlines()
    err = proc.stderr.splitlines()
    for r in range(np_):
        assert f"[{r}]: hello rank={r} size={np_} args=['a', '--flag']" in out, show(proc)
        assert f"[{r}]: to-stderr rank={r}" in err, show(proc)   # stderr stays on stderr
    assert not any("to-stderr" in line for line in out), show(proc)
    assert not any("hello" in line for line in err), show(proc)
    assert not any("<stdout>" in line or "<stderr>" in line for line in out + err), show(proc)


def test_no_prefix():
    proc, _ = run_launcher("-np", 2, "--no-prefix", sys.executable, worker("launcher_hello.py"))
    assert proc.returncode == 0, show(proc)
    lines = proc.stdout.splitlines()
    assert "hello rank=0 size=2 args=[]" in lines and "hello rank=1 size=2 args=[]" in lines, show(proc)
    assert not any(line.startswith("[") for line in lines), show(proc)


def test_env_forwarding_and_knob_flags():
    proc, _ = run_launcher("-np", 2, "--fusion-threshold-mb", "1.5", "--cycle-time-ms", "2.5",
                           "--verbose", "-x", "HVDLITE_EXTRA=set-by-x",
                           sys.executable, worker("launcher_hello.py"),
                           env={"HVDLITE_CUSTOM_KNOB": "forwarded-42",
                                "HVDLITE_CYCLE_TIME": "99"})   # the flag overrides this
    assert proc.returncode == 0, show(proc)
    for r in range(2):
        for expected in ("HVDLITE_CUSTOM_KNOB=forwarded-42",
                         f"HVDLITE_FUSION_THRESHOLD={int(1.5 * 1024 * 1024)}",
                         "HVDLITE_CYCLE_TIME=2.5", "HVDLITE_LOG_LEVEL=debug",
                         "HVDLITE_EXTRA=set-by-x"):
            assert f"[{r}]: env {expected}" in proc.stdout.splitlines(), show(proc)
    # --verbose prints the mpirun command, with -x for every HVDLITE_* variable.
    assert "hvdlite-run: running:" in proc.stderr, show(proc)
    cmdline = [line for line in proc.stderr.splitlines() if "running:" in line][0]
    for flag in ("-x HVDLITE_CUSTOM_KNOB", "-x HVDLITE_FUSION_THRESHOLD", "-x HVDLITE_CYCLE_TIME",
                 "-x HVDLITE_LOG_LEVEL", "-x PATH", "--bind-to none", "--oversubscribe"):
        assert flag in cmdline, cmdline


def test_failing_rank_ends_job_and_is_summarised():
    proc, elapsed = run_launcher("-np", 2, sys.executable, worker("launcher_fail.py"))
    assert proc.returncode != 0, show(proc)
    assert elapsed < 20, f"the job took {elapsed:.1f} s to end after rank 1 failed\n{show(proc)}"
    assert "rank 0 should have been killed" not in proc.stdout
    err = proc.stderr
    header = "hvdlite-run: rank 1 exited with code 3; its last output:"
    assert header in err, show(proc)
    summary = err[err.index(header):]
    assert "[1]: DISTINCTIVE-FAILURE-7f3a: rank 1 gives up" in summary, show(proc)
    # The failing rank's error is the last thing printed.
    assert err.rstrip().splitlines()[-1] == "[1]: DISTINCTIVE-FAILURE-7f3a: rank 1 gives up", show(proc)


def test_program_not_found():
    proc, _ = run_launcher("-np", 2, "hvdlite-no-such-program-x9")
    assert proc.returncode != 0, show(proc)
    assert ("hvdlite-run: mpirun could not find the program 'hvdlite-no-such-program-x9'"
            in proc.stderr), show(proc)


def test_sigterm_is_forwarded():
    cmd = ["timeout", "--kill-after=10", str(HARD_TIMEOUT), sys.executable, "-m", "hvdlite.runner",
           "-np", "1", sys.executable, worker("launcher_fail.py")]   # rank 0 sleeps 60 s
    proc = subprocess.Popen(cmd, env=launcher_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)
    try:
        assert "started rank=0" in proc.stdout.readline()
        start = time.monotonic()
        proc.send_signal(signal.SIGTERM)   # `timeout` passes it on to hvdlite-run
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert time.monotonic() - start < 15
    assert proc.returncode == 128 + signal.SIGTERM, (proc.returncode, out, err)
    assert "hvdlite-run: stopped by SIGTERM" in err, err


def test_missing_np_is_a_usage_error():
    proc, _ = run_launcher(sys.executable, worker("launcher_hello.py"))
    assert proc.returncode == 2, show(proc)
    assert "hvdlite-run: error: -np N is required" in proc.stderr, show(proc)
    assert "usage:" in proc.stderr


@pytest.mark.parametrize("argv, message", [
    (["-np", "2"], "no command given"),
    (["-np", "2", "--"], "no command given"),
    (["-np", "zero", "python", "x.py"], "expected a whole number of ranks"),
    (["-np", "0", "python", "x.py"], "must be at least 1"),
    (["-np", "2", "--fusion-threshold-mb", "-1", "python", "x.py"], "expected a finite number >= 0"),
    (["-np", "2", "--cycle-time-ms", "0", "python", "x.py"], "expected a number > 0"),
    (["-np", "2", "--bogus-flag", "python", "x.py"], "unrecognized arguments"),
    (["-np", "2", "--mpirun", "/nonexistent/mpirun", "python", "x.py"], "cannot find mpirun"),
    (["-np", "2", "-H", "", "python", "x.py"], "names no hosts"),
    (["-np", "2", "--hostfile", "/nonexistent/hosts", "python", "x.py"], "cannot read --hostfile"),
])
def test_usage_errors(argv, message, capsys):
    assert launch.main(argv) == 2
    err = capsys.readouterr().err
    assert "hvdlite-run: error:" in err and message in err, err


def test_mpirun_not_found(monkeypatch, tmp_path):
    import builtins
    real_import = builtins.__import__

    def no_core(name, *args, **kwargs):
        if name == "hvdlite" and args and args[2] and "_core" in args[2]:
            raise ImportError("no core in this test")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_core)
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(launch.UsageError, match="cannot find mpirun.*no mpirun on PATH"):
        launch.find_mpirun()


# ---------------------------------------------------------------------------------------
# command construction (no processes)

def _cmd(argv, env=None):
    args = launch.make_parser().parse_args(argv)
    base = {"PATH": "/usr/bin", "HOME": "/root"} if env is None else env
    return launch.build_command(args, "/opt/mpi/bin/mpirun", base_env=base)


def test_build_command_local():
    cmd, env, notes = _cmd(["-np", "4", "python", "train.py", "--lr", "0.1", "-np", "9"])
    assert cmd[:3] == ["/opt/mpi/bin/mpirun", "-np", "4"]
    assert cmd[-6:] == ["python", "train.py", "--lr", "0.1", "-np", "9"]   # script args untouched
    assert "--oversubscribe" in cmd and "--output" in cmd and ["--bind-to", "none"] == cmd[3:5]
    assert env["PYTHONUNBUFFERED"] == "1"
    if os.geteuid() == 0:
        assert env["OMPI_ALLOW_RUN_AS_ROOT"] == "1" and env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    assert not notes


def test_build_command_hosts_and_slots():
    cmd, _, notes = _cmd(["-np", "8", "-H", "nodeA:4,nodeB:4", "python", "t.py"])
    assert cmd[cmd.index("--host") + 1] == "nodeA:4,nodeB:4"
    assert "--oversubscribe" not in cmd and not notes
    cmd, _, notes = _cmd(["-np", "10", "-H", "nodeA:4,nodeB", "python", "t.py"])
    assert cmd[cmd.index("--host") + 1] == "nodeA:4,nodeB:1"
    assert "--oversubscribe" in cmd and "exceeds the 5 slots" in notes[0]
    cmd, _, _ = _cmd(["-np", "6", "-H", "localhost:2", "python", "t.py"])
    assert "--oversubscribe" in cmd   # this machine only: always


def test_build_command_hostfile(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# cluster\nnodeA slots=2\nnodeB slots=2 max_slots=4\n\n")
    cmd, _, _ = _cmd(["-np", "4", "--hostfile", str(hostfile), "python", "t.py"])
    assert cmd[cmd.index("--hostfile") + 1] == str(hostfile) and "--oversubscribe" not in cmd
    cmd, _, notes = _cmd(["-np", "5", "--hostfile", str(hostfile), "python", "t.py"])
    assert "--oversubscribe" in cmd and notes
    hostfile.write_text("nodeA\nnodeB\n")   # slots unknown: mpirun decides
    cmd, _, _ = _cmd(["-np", "64", "--hostfile", str(hostfile), "python", "t.py"])
    assert "--oversubscribe" not in cmd


def test_build_command_forwards_env():
    base = {"PATH": "/bin", "PYTHONPATH": "/src", "LD_LIBRARY_PATH": "/lib",
            "HVDLITE_A": "1", "HVDLITE_B": "2", "UNRELATED": "x"}
    cmd, env, _ = _cmd(["-np", "2", "--fusion-threshold-mb", "64", "--cycle-time-ms", "1",
                        "-x", "MY_VAR=7", "python", "t.py"], env=base)
    forwarded = [cmd[i + 1] for i, c in enumerate(cmd) if c == "-x"]
    for name in ("HVDLITE_A", "HVDLITE_B", "HVDLITE_FUSION_THRESHOLD", "HVDLITE_CYCLE_TIME",
                 "PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONUNBUFFERED", "MY_VAR"):
        assert name in forwarded
    assert "UNRELATED" not in forwarded and "HVDLITE_LOG_LEVEL" not in forwarded
    assert env["HVDLITE_FUSION_THRESHOLD"] == str(64 * 1024 * 1024)
    assert env["HVDLITE_CYCLE_TIME"] == "1" and env["MY_VAR"] == "7"
    assert base["PATH"] == "/bin" and "HVDLITE_CYCLE_TIME" not in base   # caller's dict untouched


# ---------------------------------------------------------------------------------------
# output parsing (no processes)

def test_split_line_handles_glued_output():
    split = OutputRouter.split_line
    assert split(b"[1,0]<stdout>: hello") == [(0, b"hello")]
    assert split(b"[1,12]<stderr>: ") == [(12, b"")]
    assert split(b"plain mpirun text") == [(None, b"plain mpirun text")]
    # A rank's last line without a newline gets the next tag glued on.
    assert split(b"[1,0]<stdout>: no newline[1,1]<stdout>: other") == [(0, b"no newline"),
                                                                       (1, b"other")]
    assert split(b"[1,1]<stdout>: tail" + b"-" * 74) == [(1, b"tail"), (None, b"-" * 74)]


def test_failure_summary_from_mpirun_messages():
    import io
    router = OutputRouter()
    stderr = (b"[1,0]<stderr>: fine\n"
              b"[1,2]<stderr>: Traceback (most recent call last):\n"
              b"[1,2]<stderr>: ValueError: bad\n"
              b"[1,2]<stderr>: " + b"-" * 74 + b"\n"
              b"[1,2]<stderr>: MPI_ABORT was invoked on rank 2 in communicator MPI_COMM_WORLD\n"
              b"[1,2]<stderr>:   Errorcode: 1\n"
              b"[1,2]<stderr>: " + b"-" * 74 + b"\n" + b"-" * 74 + b"\n"
              b"prterun has exited due to process rank 2 with PID 0 on node vm calling\n"
              b'"abort". This may have caused other processes in the application to be\n'
              + b"-" * 74 + b"\n[1,2]<stderr>: \x00\n")
    router.pump(io.BytesIO(stderr), io.BytesIO(), "stderr")
    from hvdlite.runner.output import failure_summary
    text = failure_summary(router, 1).decode()
    assert text.splitlines() == ["hvdlite-run: rank 2 called MPI_Abort with error code 1; its last output:",
                                 "[2]: Traceback (most recent call last):",
                                 "[2]: ValueError: bad"], text


def test_failed_rank_from_signal_and_exit_messages():
    import io
    router = OutputRouter()
    router.pump(io.BytesIO(b"[1,3]<stdout>: working\n" + b"-" * 74 + b"\n"
                           b"prterun noticed that process rank 3 with PID 4242 on node n1 exited on\n"
                           b"signal 9 (Killed).\n" + b"-" * 74 + b"\n"), io.BytesIO(), "stderr")
    assert router.failed_rank() == (3, "was killed by signal 9 (Killed)")
    router = OutputRouter()
    router.pump(io.BytesIO(b"   Process name: [prterun-vm-3147@1,12]\n   Exit code:    7\n"),
                io.BytesIO(), "stderr")
    assert router.failed_rank() == (12, "exited with code 7")


# ---------------------------------------------------------------------------------------
# hvdlite jobs (need the built core)

def _core_available():
    try:
        from hvdlite import _core  # noqa: F401
        import hvdlite
        return hasattr(hvdlite, "init")
    except Exception:
        return False


needs_core = pytest.mark.skipif(not _core_available(), reason="hvdlite core is not built")


@needs_core
def test_hvdlite_allreduce_through_launcher():
    proc, _ = run_launcher("-np", 2, sys.executable, worker("launcher_hvd_allreduce.py"))
    assert proc.returncode == 0, show(proc)
    for r in range(2):
        assert f"[{r}]: allreduce ok rank={r} size=2 local_rank={r} first=1" in proc.stdout.splitlines(), show(proc)


@needs_core
def test_hvdlite_rank_raising_ends_job():
    proc, elapsed = run_launcher("-np", 2, sys.executable, worker("launcher_hvd_raise.py"))
    assert proc.returncode != 0, show(proc)
    assert elapsed < 30, f"the job took {elapsed:.1f} s to end after rank 1 raised\n{show(proc)}"
    assert "should not get here" not in proc.stdout, show(proc)
    err = proc.stderr
    assert "hvdlite-run: rank 1 " in err, show(proc)
    summary = err[err.index("hvdlite-run: rank 1 "):]
    assert "[1]: Traceback (most recent call last):" in summary, show(proc)
    assert "[1]: ValueError: DISTINCTIVE-RAISE-91c2 from rank 1" in summary, show(proc)


@pytest.mark.skipif(not __import__("shutil").which("hvdlite-run"),
                    reason="hvdlite-run console script not installed")
def test_console_script():
    cmd = ["timeout", "--kill-after=10", str(HARD_TIMEOUT), "hvdlite-run", "-np", "2",
           sys.executable, worker("launcher_hello.py")]
    proc = subprocess.run(cmd, env=launcher_env(), capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, show(proc)
    assert "[1]: hello rank=1 size=2 args=[]" in proc.stdout.splitlines(), show(proc)
