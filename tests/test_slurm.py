"""hvdlite under a real Slurm (slurmctld + slurmd on this machine, scripts/start_slurm.sh),
at 2 and 4 ranks: ``srun`` alone, ``hvdlite-run`` inside ``salloc`` (no -np), ``sbatch`` of
docs/slurm.md's batch script, and each launch mistake's error.

The cluster is started once for the module, in build/slurm-test/ on free ports (so a Slurm
started by hand, or another checkout's tests, is left alone), and stopped at the end. Where the
daemons cannot run (not root, no Slurm and no apt-get to install it) every test is skipped with
the script's reason. Every command has a hard timeout, and Slurm's own time limit ends a job
that outlives it.
"""
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys

import pytest

from mpi_launch import HERE, REPO, failure_summary, mpi

JOB_MINUTES = 4            # Slurm's limit for each job (-t): a hung job ends by itself
TIMEOUT = JOB_MINUTES * 60  # and each command's
WORKER = os.path.join(HERE, "workers", "slurm_topology.py")
DIGITS = os.path.join(REPO, "examples", "pytorch_digits.py")
EPOCHS = "2"
SIZES = [2, 4]


def _torch_installed():
    # The other MPIs' environments (scripts/setup_other_mpi.sh) have no torch.
    spec = importlib.util.find_spec("torch")
    return spec is not None and spec.origin not in (None, "namespace")


needs_torch = pytest.mark.skipif(not _torch_installed(), reason="the example uses torch")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _flavour():
    return mpi()[1].name


def _plugin():
    """srun's plugin for the MPI hvdlite was built with (measured: docs/slurm.md)."""
    return "pmix" if _flavour() == "Open MPI" else "pmi2"


HOST = socket.gethostname().split(".")[0]   # the node's name (start_slurm.sh: hostname -s)


def _hvdlite_run():
    found = shutil.which("hvdlite-run", path=os.path.dirname(sys.executable))
    return [found] if found else [sys.executable, "-m", "hvdlite.runner"]


@pytest.fixture(scope="module")
def slurm():
    """The environment in which sinfo, srun, salloc and sbatch reach the test cluster."""
    directory = os.path.join(REPO, "build", "slurm-test")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "OMPI_", "PMI_",
                                "PMIX_"))}
    ports = set()
    while len(ports) < 2:
        ports.add(_free_port())
    ctld, slurmd = sorted(ports)
    env.update(HVDLITE_SLURM_DIR=directory, HVDLITE_SLURMCTLD_PORT=str(ctld),
               HVDLITE_SLURMD_PORT=str(slurmd))
    start = subprocess.run(["timeout", "600", "bash", os.path.join(REPO, "scripts", "start_slurm.sh")],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if start.returncode == 77:
        pytest.skip(start.stdout.strip().splitlines()[-1])
    assert start.returncode == 0, f"scripts/start_slurm.sh failed:\n{start.stdout}"
    env.update(SLURM_CONF=os.path.join(directory, "slurm.conf"), OMP_NUM_THREADS="1",
               PYTHONUNBUFFERED="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
               PYTHONPATH=HERE + os.pathsep + env.get("PYTHONPATH", ""))
    try:
        yield env
    finally:
        subprocess.run(["timeout", "120", "bash", os.path.join(REPO, "scripts", "stop_slurm.sh")],
                       env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run(env, *argv, expect=0, extra_env=None):
    """Run a Slurm command; its output (stdout + stderr). ``expect``: the exit status, or None
    for any but 0."""
    cmd = ["timeout", "--kill-after=10", str(TIMEOUT), *argv]
    proc = subprocess.run(cmd, env=dict(env, **(extra_env or {})), cwd=REPO, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    ok = proc.returncode != 0 if expect is None else proc.returncode == expect
    assert ok, (failure_summary(proc.stdout) + f"{' '.join(argv)} exited with "
                f"{proc.returncode}" + (" (timed out)" if proc.returncode in (124, 137) else "")
                + f"\n--- output ---\n{proc.stdout[-20000:]}")
    return proc.stdout


def srun(env, np_, *argv, plugin=None, expect=0):
    return run(env, "srun", "-n", str(np_), "-t", str(JOB_MINUTES), f"--mpi={plugin or _plugin()}",
               "--kill-on-bad-exit=1", *argv, expect=expect)


def salloc(env, np_, *argv, expect=0, extra_env=None):
    return run(env, "salloc", "-n", str(np_), "-t", str(JOB_MINUTES), *argv, expect=expect,
               extra_env=extra_env)


def _trained(out, np_):
    """The digits example finished at np_ ranks (rank 0 reports)."""
    assert re.search(rf"^(\[0\]: )?{np_} ranks, \d+ training samples per rank", out, re.M), out
    assert re.search(rf"^(\[0\]: )?final test accuracy \d+\.\d+% in", out, re.M), out


# -- srun alone -------------------------------------------------------------------------

@pytest.mark.parametrize("np_", SIZES)
def test_srun_runs_collectives_with_the_jobs_topology(slurm, np_):
    out = srun(slurm, np_, sys.executable, WORKER, str(np_), "srun")
    assert sorted(re.findall(r"slurm worker ok: rank (\d+) of (\d+)", out)) == \
        [(str(r), str(np_)) for r in range(np_)], out


@needs_torch
@pytest.mark.parametrize("np_", SIZES)
def test_srun_runs_the_torch_example(slurm, np_):
    _trained(srun(slurm, np_, sys.executable, DIGITS, "--epochs", EPOCHS), np_)


# -- hvdlite-run inside an allocation: no -np, no -H ------------------------------------

@pytest.mark.parametrize("np_", SIZES)
def test_hvdlite_run_in_salloc_takes_the_allocation(slurm, np_):
    decided = salloc(slurm, np_, *_hvdlite_run(), "--dry-run", sys.executable, WORKER, str(np_))
    assert re.search(rf"hosts from Slurm job \d+ \(SLURM_JOB_NODELIST={HOST}, "
                     rf"SLURM_TASKS_PER_NODE={np_}\): {HOST}:{np_}", decided), decided
    assert re.search(rf"-np {np_}: the task count of Slurm job \d+ \(SLURM_NTASKS={np_}\)",
                     decided), decided
    out = salloc(slurm, np_, *_hvdlite_run(), sys.executable, WORKER, str(np_))
    assert sorted(re.findall(r"^\[(\d+)\]: slurm worker ok: rank \1 of (\d+)", out, re.M)) == \
        [(str(r), str(np_)) for r in range(np_)], out


@needs_torch
@pytest.mark.parametrize("np_", SIZES)
def test_hvdlite_run_in_salloc_runs_the_torch_example(slurm, np_):
    _trained(salloc(slurm, np_, *_hvdlite_run(), sys.executable, DIGITS, "--epochs", EPOCHS), np_)


# -- sbatch of docs/slurm.md's script ---------------------------------------------------

def _doc_batch_script():
    """The batch script of docs/slurm.md, as the page shows it (one copy: the page's)."""
    text = open(os.path.join(REPO, "docs", "slurm.md")).read()
    scripts = re.findall(r"```bash\n(#!/bin/bash\n.*?)```", text, re.S)
    assert scripts and "#SBATCH --nodes=2" in scripts[0] and "hvdlite-run" in scripts[0], \
        "docs/slurm.md lost its 2-node hvdlite-run batch script"
    return scripts[0]


@needs_torch
@pytest.mark.parametrize("np_", SIZES)
def test_sbatch_of_the_documented_script(slurm, np_, tmp_path):
    script = tmp_path / "digits.sh"
    script.write_text(_doc_batch_script())
    output = tmp_path / "digits.out"
    # One node here: sbatch's options override the script's #SBATCH lines.
    try:
        run(slurm, "sbatch", "--wait", "--nodes=1", f"--ntasks-per-node={np_}",
            "--cpus-per-task=1", f"--time={JOB_MINUTES}", f"--output={output}",
            f"--chdir={REPO}", str(script), extra_env={"EPOCHS": EPOCHS})
    except AssertionError as e:   # the job's own output is in its file
        job = output.read_text() if output.exists() else "(no output file)"
        raise AssertionError(f"{e}\n--- the job's output ---\n{job[-20000:]}") from None
    _trained(output.read_text(), np_)


# -- launch mistakes --------------------------------------------------------------------

def test_np_above_the_allocation_is_an_error(slurm):
    out = salloc(slurm, 2, *_hvdlite_run(), "-np", "4", sys.executable, WORKER, "4", expect=2)
    assert re.search(r"hvdlite-run: error: -np 4 is more than the 2 slots of Slurm job \d+ "
                     r"\(SLURM_JOB_NODELIST=\S+, SLURM_TASKS_PER_NODE=2\); ask Slurm for 4 "
                     r"tasks \(salloc -n 4, #SBATCH --ntasks=4\), or pass --oversubscribe", out), out
    assert "slurm worker ok" not in out


def test_an_allocation_without_usable_hosts_is_an_error(slurm):
    out = salloc(slurm, 2, "env", "SLURM_JOB_NODELIST=", *_hvdlite_run(), sys.executable, WORKER,
                 "2", expect=2)
    assert re.search(r"hvdlite-run: error: Slurm job \d+ has no usable hosts: SLURM_JOB_NODELIST "
                     r"is empty", out), out


def test_hvdlite_run_as_several_srun_tasks_is_an_error(slurm):
    out = srun(slurm, 2, *_hvdlite_run(), sys.executable, WORKER, "2", expect=None)
    assert len(re.findall(r"hvdlite-run: error: hvdlite-run runs as task \d of 2 of srun step "
                          r"\d+\.\d+: each task would start a job of its own", out)) == 2, out


@pytest.mark.parametrize("np_", SIZES)
def test_srun_without_the_mpis_plugin_is_an_error_on_every_rank(slurm, np_):
    out = srun(slurm, np_, sys.executable, WORKER, str(np_), plugin="none", expect=None)
    assert out.count(f"HvdliteLaunchError: hvdlite.init(): srun started {np_} processes "
                     f"(SLURM_STEP_NUM_TASKS={np_}), but MPI's world has 1: each process "
                     f"initialised MPI alone") == np_, out
    assert f"`srun --mpi={_plugin()}`" in out and "slurm worker ok" not in out


def test_srun_with_the_other_mpis_plugin_fails(slurm):
    if _flavour() == "Open MPI":   # PMI-2 gives Open MPI 5 singletons: hvdlite's error
        out = srun(slurm, 2, sys.executable, WORKER, "2", plugin="pmi2", expect=None)
        assert out.count("HvdliteLaunchError: hvdlite.init(): a PMI launcher (MPICH's or Intel "
                         "MPI's mpiexec, or srun --mpi=pmi2) started 2 processes (PMI_SIZE=2), "
                         "but MPI's world has 1") == 2, out
    else:                          # MPICH stops in MPI_Init itself under PMIx
        out = srun(slurm, 2, sys.executable, WORKER, "2", plugin="pmix", expect=None)
        assert out.count("Runtime environment uses unsupported PMI version PMIx") == 2, out
    assert "slurm worker ok" not in out


@needs_torch
@pytest.mark.parametrize("np_", SIZES)
def test_torchrun_style_master_addr_and_port_in_an_allocation(slurm, np_):
    # sbatch scripts written for torchrun export MASTER_ADDR / MASTER_PORT but not RANK /
    # WORLD_SIZE: init_process_group("hvdlite") takes the ranks from the engine.
    worker = os.path.join(HERE, "workers", "c10d_master_only.py")
    out = salloc(slurm, np_, "bash", "-c",
                 'export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
                 f' MASTER_PORT={_free_port()}; exec "$@"', "job",
                 *_hvdlite_run(), sys.executable, worker, "here")
    assert out.count("master only ok") == np_, out
