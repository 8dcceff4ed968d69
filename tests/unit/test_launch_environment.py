"""hvdlite.policy.launch_environment: how many processes each launcher says it started, and
the error at init where MPI's world holds another number (Note [which launcher variable])."""

import pytest

from hvdlite.exceptions import HvdliteError, HvdliteLaunchError
from hvdlite.policy.launch_environment import check_world_size, expected_world_size

OPEN_MPI = "Open MPI v5.0.11, package: Open MPI builder Distribution, ident: 5.0.11"
MPICH = "MPICH Version:      4.3.0\nMPICH Release date: ..."

SRUN_STEP = {"SLURM_JOB_ID": "3", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "4",
             "SLURM_NTASKS": "4", "SLURM_PROCID": "2"}


@pytest.mark.parametrize("environ,expected", [
    ({}, None),
    ({"OMPI_COMM_WORLD_SIZE": "4", "PMIX_RANK": "0"}, (4, "OMPI_COMM_WORLD_SIZE")),
    ({"PMI_SIZE": "3", "PMI_RANK": "1"}, (3, "PMI_SIZE")),
    # PMIx alone names no size (prterun and srun --mpi=pmix set none).
    ({"PMIX_RANK": "1", "PMIX_NAMESPACE": "slurm.pmix.1.0"}, None),
    (SRUN_STEP, (4, "SLURM_STEP_NUM_TASKS")),
    ({"SLURM_STEP_ID": "0", "SLURM_NTASKS": "2"}, (2, "SLURM_NTASKS")),
    ({"SLURM_STEP_ID": "0", "SLURM_NPROCS": "2"}, (2, "SLURM_NPROCS")),
    # A batch script's or salloc's shell: the allocation's count, no step. hvdlite-run's ranks
    # inherit it.
    ({"SLURM_JOB_ID": "3", "SLURM_NTASKS": "4"}, None),
    # srun -n 1 some-launcher: one task says nothing about the processes it starts.
    ({"SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "1", "SLURM_NTASKS": "1"}, None),
    # The launcher that numbered this process wins over the step it ran in.
    (dict(SRUN_STEP, OMPI_COMM_WORLD_SIZE="8"), (8, "OMPI_COMM_WORLD_SIZE")),
    (dict(SRUN_STEP, PMI_SIZE="8"), (8, "PMI_SIZE")),
    ({"OMPI_COMM_WORLD_SIZE": ""}, None),
])
def test_what_each_launcher_says(environ, expected):
    assert expected_world_size(environ) == expected


@pytest.mark.parametrize("environ,size", [
    ({}, 1), ({}, 4), (SRUN_STEP, 4), ({"OMPI_COMM_WORLD_SIZE": "2"}, 2),
    ({"SLURM_JOB_ID": "3", "SLURM_NTASKS": "4"}, 2),
])
def test_an_agreeing_or_silent_launcher_passes(environ, size):
    check_world_size(size, environ, OPEN_MPI)


def test_srun_without_the_plugin_names_both_numbers_and_the_flag():
    with pytest.raises(HvdliteLaunchError) as e:
        check_world_size(1, SRUN_STEP, OPEN_MPI)
    assert str(e.value) == (
        "hvdlite.init(): srun started 4 processes (SLURM_STEP_NUM_TASKS=4), but MPI's world "
        "has 1: each process initialised MPI alone (a singleton) and would train by itself, "
        "because hvdlite's MPI (Open MPI v5.0.11) did not understand the launcher. srun needs "
        "the MPI's plugin: `srun --mpi=pmix` (Open MPI 5 talks to Slurm through PMIx only); "
        "`srun --mpi=list` shows what this Slurm offers. Or run hvdlite-run inside the "
        "allocation.")
    assert isinstance(e.value, HvdliteError)


def test_mpich_is_told_its_own_plugin():
    with pytest.raises(HvdliteLaunchError, match=r"MPI \(MPICH Version: 4.3.0\).*"
                                                 r"`srun --mpi=pmi2`"):
        check_world_size(1, SRUN_STEP, MPICH)


def test_another_mpis_launcher_is_named():
    with pytest.raises(HvdliteLaunchError,
                       match=r"Open MPI's mpirun started 2 processes \(OMPI_COMM_WORLD_SIZE=2\), "
                             r"but MPI's world has 1: .*Start it with hvdlite-run \(or its "
                             r"mpiexec\) of the MPI hvdlite was built with"):
        check_world_size(1, {"OMPI_COMM_WORLD_SIZE": "2"}, MPICH)


def test_a_world_of_another_size_is_named_too():
    with pytest.raises(HvdliteLaunchError, match=r"started 3 processes \(PMI_SIZE=3\), but "
                                                 r"MPI's world has 2: the launcher and MPI "
                                                 r"disagree"):
        check_world_size(2, {"PMI_SIZE": "3"}, OPEN_MPI)
