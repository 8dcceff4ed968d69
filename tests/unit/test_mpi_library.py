"""Which MPI library hvdlite loads (hvdlite.mpi_library): the search order, as pure functions
of the environment and the folders searched."""
import os

from hvdlite import mpi_library as m


def _wheel(prefix, *names):
    os.makedirs(prefix / "lib", exist_ok=True)
    for name in names:
        (prefix / "lib" / name).write_bytes(b"")


def test_explicit_library_is_the_only_candidate(tmp_path):
    _wheel(tmp_path, "libmpi.so.40")
    found = m.candidates({m.LIBRARY_ENV: "/opt/mpi/lib/libmpi.so.12"}, [str(tmp_path)],
                         already_loaded="/x/libmpi.so.40")
    assert found == [m.Candidate("/opt/mpi/lib/libmpi.so.12", m.LIBRARY_ENV)]


def test_a_library_already_loaded_wins_over_any_search(tmp_path):
    _wheel(tmp_path, "libmpi.so.12")
    assert m.candidates({}, [str(tmp_path)], already_loaded="/x/libmpi.so.40") == \
        [m.Candidate("/x/libmpi.so.40", "already loaded in this process")]


def test_wheels_come_before_the_system_and_open_mpi_first(tmp_path):
    env_prefix, base_prefix = tmp_path / "venv", tmp_path / "base"
    _wheel(env_prefix, "libmpi.so.12")
    _wheel(base_prefix, "libmpi.so.40", "libmpi_abi.so.1")
    found = m.candidates({}, [str(env_prefix), str(base_prefix)])
    assert [c.library for c in found] == [
        str(env_prefix / "lib" / "libmpi.so.12"),
        str(base_prefix / "lib" / "libmpi.so.40"), str(base_prefix / "lib" / "libmpi_abi.so.1"),
        "libmpi.so.40", "libmpi.so.12", "libmpi_abi.so.1"]
    assert found[0].reason == f"the MPI wheel in {env_prefix}"
    assert found[-1].reason == "the system's library path"


def test_the_launchers_family_filters_the_search(tmp_path):
    _wheel(tmp_path, "libmpi.so.40", "libmpi.so.12", "libmpi_abi.so.1")
    hydra = m.candidates({"PMI_SIZE": "2", "MPI_LOCALNRANKS": "2"}, [str(tmp_path)])
    assert [os.path.basename(c.library) for c in hydra] == \
        ["libmpi.so.12", "libmpi_abi.so.1", "libmpi.so.12", "libmpi_abi.so.1"]
    ompi = m.candidates({"OMPI_COMM_WORLD_SIZE": "4"}, [str(tmp_path)])
    assert [os.path.basename(c.library) for c in ompi] == ["libmpi.so.40", "libmpi.so.40"]


def test_launcher_from_environment():
    assert m.launcher({}) is None
    ompi = m.launcher({"OMPI_COMM_WORLD_SIZE": "3"})
    assert ompi.families == ("openmpi",) and ompi.describe() == \
        "Open MPI's mpirun (OMPI_COMM_WORLD_SIZE=3)"
    assert m.launcher({"PMI_SIZE": "2", "MPI_LOCALNRANKS": "2"}).families == ("mpich", "mpiabi")
    # Slurm's srun --mpi=pmi2 sets PMI_SIZE alone: no family follows from it.
    assert m.launcher({"PMI_SIZE": "2", "SLURM_STEP_ID": "0"}) is None


def test_loaded_library_read_from_the_maps(tmp_path):
    maps = tmp_path / "maps"
    maps.write_text(
        "7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libc.so.6\n"
        "7f02-7f03 rw-p 00000000 00:00 0 \n"
        "7f04-7f05 r-xp 00000000 08:01 2 /opt/my mpi/lib/libmpi.so.40.30.4\n")
    assert m.loaded_in_process(str(maps)) == "/opt/my mpi/lib/libmpi.so.40.30.4"
    maps.write_text("7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/libmpich_stub.so\n")
    assert m.loaded_in_process(str(maps)) is None


def test_launcher_program_beside_the_library(tmp_path):
    (tmp_path / "bin").mkdir()
    mpirun = tmp_path / "bin" / "mpiexec"
    mpirun.write_text("#!/bin/sh\n")
    mpirun.chmod(0o755)
    _wheel(tmp_path, "libmpi.so.12")
    assert m.launcher_program(str(tmp_path / "lib" / "libmpi.so.12")) == str(mpirun)
