"""Launch a worker script under mpirun with a hard timeout; used by every multi-process test.

A hang fails the test after ``timeout`` seconds (``timeout`` kills mpirun and its ranks)
instead of eating CI's time.
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_TIMEOUT = 300


def mpi_env(extra=None):
    env = dict(os.environ)
    env.update({
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    })
    env.setdefault("PYTHONPATH", "")
    env["PYTHONPATH"] = HERE + os.pathsep + env["PYTHONPATH"]
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    return env


def mpirun_path():
    from hvdlite import _core
    return _core.build_info()["mpirun"] or shutil.which("mpirun")


def run_mpi(np, script, *args, env=None, timeout=DEFAULT_TIMEOUT, check=True):
    """Run ``python script args`` at ``np`` ranks; return CompletedProcess (stdout+stderr text).

    With ``check`` the test fails (showing the ranks' output) unless every rank exits 0.
    """
    script = script if os.path.isabs(script) else os.path.join(HERE, script)
    # The -x flags forward the settings to every rank, also when ranks start on other hosts.
    cmd = ["timeout", "--kill-after=10", str(timeout), mpirun_path(), "-np", str(np),
           "--oversubscribe", "--bind-to", "none",
           sys.executable, script, *map(str, args)]
    proc = subprocess.run(cmd, env=mpi_env(env), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} exited with {proc.returncode}"
            + (" (timed out)" if proc.returncode in (124, 137) else "")
            + f"\n--- output ---\n{proc.stdout[-20000:]}")
    return proc
