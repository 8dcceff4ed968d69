"""How many processes the launcher started, as its environment says, against the MPI world.

A launcher that starts N processes without the MPI library in them knowing it gives N
*singleton* worlds: every process runs MPI_Init alone, sees a world of size 1 and trains by
itself, and nothing fails. This happens with ``srun`` without the MPI's plugin (``--mpi=none``,
or ``--mpi=pmi2`` for Open MPI 5, which needs PMIx), and with one MPI's launcher starting a
program built against another MPI (Open MPI's mpirun, MPICH's library). The launcher's own
variables still say N: :func:`expected_world_size` reads them, :func:`check_world_size`
compares them with the world MPI_Init gave, on every rank, right after init.

Measured under Slurm 22.05 (docs/slurm.md): the Open MPI 5 wheel runs under ``srun
--mpi=pmix`` and gives singletons under ``--mpi=none`` and ``--mpi=pmi2``; MPICH 5.0 (its
wheel) runs under ``--mpi=pmi2``, gives singletons under ``--mpi=none`` and aborts in MPI_Init
under ``--mpi=pmix`` ("Runtime environment uses unsupported PMI version PMIx").

Note [which launcher variable]
What each launcher sets for every process it starts (measured on this project's machines):

- Open MPI's mpirun (prterun in 5.x, orterun in 4.x): OMPI_COMM_WORLD_SIZE.
- Hydra (MPICH's and Intel MPI's mpiexec), and Slurm's ``srun --mpi=pmi2``: PMI_SIZE.
- PMIx servers (prterun, ``srun --mpi=pmix``) set PMIX_RANK and PMIX_NAMESPACE but no size:
  there is no PMIX_SIZE, so PMIx alone says nothing here.
- ``srun`` (any --mpi): SLURM_STEP_NUM_TASKS (older Slurm: SLURM_NTASKS / SLURM_NPROCS, which
  srun also sets for its step), and SLURM_STEP_ID. Only inside a step: a batch script's shell
  and salloc's have SLURM_NTASKS (the allocation's) but no SLURM_STEP_ID, and the processes
  hvdlite-run or mpirun starts there inherit them, so SLURM_NTASKS alone says nothing about
  them.

The launcher that started this process directly wins: mpirun inside an srun step (hvdlite-run
in ``srun -n 1``; Open MPI's and Hydra's daemons started through srun) passes the step's
SLURM_* variables on to ranks it numbered itself. Measured: MPICH's Hydra inside ``salloc``
starts its proxy with a one-task srun step even on one node, so its ranks have SLURM_STEP_ID,
SLURM_NTASKS=1 and SLURM_PROCID=0 beside PMI_SIZE=N. A one-task step says nothing
either (``srun -n 1 some-launcher -np 4`` is legitimate). An elastic job's world changes size
by design (added ranks are spawned): the caller skips the check there.
"""

from typing import Mapping, Optional, Tuple

from hvdlite.exceptions import HvdliteLaunchError

# (variable, who sets it), in the order they are believed (Note [which launcher variable]).
LAUNCHER_VARIABLES = (
    ("OMPI_COMM_WORLD_SIZE", "Open MPI's mpirun"),
    ("PMI_SIZE", "a PMI launcher (MPICH's or Intel MPI's mpiexec, or srun --mpi=pmi2)"),
)
SLURM_TASK_VARIABLES = ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")


def _count(environ: Mapping[str, str], name: str) -> Optional[int]:
    value = environ.get(name, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def expected_world_size(environ: Mapping[str, str]) -> Optional[Tuple[int, str]]:
    """(processes the launcher started, the variable that says so), or None where nothing
    in ``environ`` says (started by hand, or by a launcher that sets none of them)."""
    for name, _ in LAUNCHER_VARIABLES:
        n = _count(environ, name)
        if n is not None:
            return n, name
    if environ.get("SLURM_STEP_ID", "").strip():
        for name in SLURM_TASK_VARIABLES:
            n = _count(environ, name)
            if n is not None:
                return (n, name) if n > 1 else None
    return None


def _who(variable: str) -> str:
    for name, who in LAUNCHER_VARIABLES:
        if name == variable:
            return who
    return "srun"


def _library_name(mpi_library: str) -> str:
    """'Open MPI v5.0.11, package: ...' -> 'Open MPI v5.0.11'; 'MPICH Version:  5.0.2\n...'
    -> 'MPICH Version: 5.0.2'."""
    first = mpi_library.strip().splitlines()[0] if mpi_library.strip() else ""
    return " ".join(first.split(",")[0].split()) or "this MPI"


def _advice(variable: str, mpi_library: str) -> str:
    """How to launch instead, for the MPI hvdlite was built with."""
    if "Open MPI" in mpi_library:
        direct = "`srun --mpi=pmix` (Open MPI 5 talks to Slurm through PMIx only)"
        own = "Open MPI's mpirun"
    elif "MPICH" in mpi_library or "Intel" in mpi_library:
        direct = "`srun --mpi=pmi2`"
        own = "its mpiexec"
    else:
        direct = "`srun --mpi=pmix` or `--mpi=pmi2`, whichever the MPI supports"
        own = "its mpirun"
    if variable.startswith("SLURM_"):
        return (f"srun needs the MPI's plugin: {direct}; `srun --mpi=list` shows what this "
                f"Slurm offers. Or run hvdlite-run inside the allocation")
    return (f"Start it with hvdlite-run (or {own}) of the MPI hvdlite was built with, or "
            f"under Slurm with {direct}")


def check_world_size(mpi_size: int, environ: Mapping[str, str], mpi_library: str = "") -> None:
    """Raise :class:`HvdliteLaunchError` where the launcher started another number of
    processes than MPI's world holds. ``mpi_library``: MPI_Get_library_version's text, for
    the advice."""
    expected = expected_world_size(environ)
    if expected is None or expected[0] == mpi_size:
        return
    n, variable = expected
    if mpi_size == 1:
        what = (f"each process initialised MPI alone (a singleton) and would train by itself, "
                f"because hvdlite's MPI ({_library_name(mpi_library)}) did not understand the "
                f"launcher")
    else:
        what = "the launcher and MPI disagree about the job"
    raise HvdliteLaunchError(
        f"hvdlite.init(): {_who(variable)} started {n} processes ({variable}={n}), but MPI's "
        f"world has {mpi_size}: {what}. {_advice(variable, mpi_library)}.")
