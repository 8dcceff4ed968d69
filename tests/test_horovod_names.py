"""Horovod's import names (hvdlite.horovod_names): off unless asked, then hvdlite's modules
themselves, over a real Horovod; an unmodified Horovod program under hvdlite-run --horovod
and under plain mpirun with HVDLITE_HOROVOD_NAMES=1.

The start-up tests run fresh interpreters, so that what they check is the installed
hvdlite_horovod_names.pth acting (or not) at start-up, as in a job.
"""
import importlib
import importlib.util
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

from mpi_launch import mpi, mpi_env, run_once_more_if_mpi_never_started  # noqa: E402

import hvdlite  # noqa: E402
from hvdlite import horovod_names  # noqa: E402
from hvdlite.exceptions import HvdliteError  # noqa: E402

pytestmark = pytest.mark.timeout(300)

WORKER = os.path.join(HERE, "workers", "horovod_names_torch.py")
HARD_TIMEOUT = 150   # seconds, per launched job or interpreter


# ---------------------------------------------------------------------------------------
# the table

def _source_file(module: str) -> str:
    """The file of an hvdlite module, found without importing it (TensorFlow need not load)."""
    base = os.path.join(os.path.dirname(hvdlite.__file__), *module.split(".")[1:])
    for candidate in (base + ".py", os.path.join(base, "__init__.py")):
        if os.path.isfile(candidate):
            return candidate
    return ""


def test_every_served_name_is_an_existing_hvdlite_module():
    for horovod_name, module in horovod_names.MODULES.items():
        assert horovod_name.startswith("horovod.") and module.startswith("hvdlite."), horovod_name
        assert _source_file(module), f"{horovod_name} -> {module}: no such hvdlite module"


def test_a_served_module_s_children_are_its_own_submodules():
    # Note [horovod names]: else importing the child would set a stray attribute on the
    # parent's hvdlite module.
    for name, module in horovod_names.MODULES.items():
        parent, _, child = name.rpartition(".")
        if parent in horovod_names.MODULES:
            assert module == horovod_names.MODULES[parent] + "." + child, name
        else:
            assert parent in horovod_names.PACKAGES, name


def test_packages_are_the_unserved_parents():
    assert horovod_names.PACKAGES == {"horovod", "horovod.common", "horovod.runner",
                                      "horovod.runner.util", "horovod.runner.common",
                                      "horovod.runner.common.util"}


# ---------------------------------------------------------------------------------------
# the finder, in this process

@pytest.fixture
def served():
    """Horovod's names installed for one test; sys.meta_path and the horovod modules are
    put back afterwards."""
    def horovod_modules():
        return {k: v for k, v in sys.modules.items() if k == "horovod" or k.startswith("horovod.")}
    meta_path, before = list(sys.meta_path), horovod_modules()
    for name in before:
        del sys.modules[name]
    horovod_names.install()
    yield
    sys.meta_path[:] = meta_path
    for name in horovod_modules():
        del sys.modules[name]
    sys.modules.update(before)


def test_torch_names_are_hvdlite_s_modules(served):
    torch = pytest.importorskip("torch")  # noqa: F841
    import hvdlite.torch
    import horovod.torch as hvd
    from horovod.torch.mpi_ops import synchronize
    import horovod.torch.elastic
    assert hvd is hvdlite.torch
    assert hvd.allreduce is hvdlite.torch.allreduce
    assert synchronize is hvdlite.torch.mpi_ops.synchronize
    assert horovod.torch.elastic is hvdlite.torch.elastic
    assert hvd.HorovodInternalError is hvdlite.HvdliteInternalError
    # The hvdlite module keeps its own identity (pickling, reload, tools that read __spec__).
    assert hvd.__name__ == "hvdlite.torch" and hvd.__spec__.name == "hvdlite.torch"
    assert importlib.import_module("horovod.torch") is hvdlite.torch


def test_framework_free_internals(served):
    import hvdlite.basics
    import hvdlite.process_sets
    import hvdlite.runner.threads
    from horovod.common.util import gloo_built, mpi_built
    from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
    from horovod.common.process_sets import ProcessSet, global_process_set
    from horovod.runner.util.threads import in_thread
    import horovod.common.elastic
    assert (gloo_built, mpi_built) == (hvdlite.basics.gloo_built, hvdlite.basics.mpi_built)
    assert HorovodInternalError is hvdlite.HvdliteInternalError
    assert HostsUpdatedInterrupt is hvdlite.exceptions.HvdliteHostsUpdatedInterrupt
    assert ProcessSet is hvdlite.ProcessSet and global_process_set is hvdlite.global_process_set
    assert in_thread is hvdlite.runner.threads.in_thread
    assert horovod.common.elastic is importlib.import_module("hvdlite.elastic")
    # No stray attribute on hvdlite's modules (Note [horovod names]).
    assert not hasattr(hvdlite, "util") and not hasattr(hvdlite, "common")
    assert not hasattr(hvdlite.runner, "util")


def test_horovod_common_util_helpers_behave_as_horovods(served, monkeypatch):
    """horovod.common.util's helpers that Horovod's tests import (hvdlite.helpers)."""
    import hvdlite.helpers
    from horovod.common.util import (_cache, env, extension_available,
                                     is_version_greater_equal_than, split_list)
    import horovod.common.util
    assert horovod.common.util is hvdlite.helpers
    # _cache: computed once per distinct arguments, keyword order aside.
    calls = []

    @_cache
    def f(x, y=0):
        calls.append((x, y))
        return len(calls)
    assert (f(1), f(1), f(1, y=2), f(1, y=2), f(2)) == (1, 1, 2, 2, 3)
    assert calls == [(1, 0), (1, 2), (2, 0)]
    # env: set for the block, then put back (removed where it was not set); None: left alone.
    monkeypatch.setenv("HVD3_A", "old")
    monkeypatch.delenv("HVD3_B", raising=False)
    with env(HVD3_A="new", HVD3_B="b", HVD3_C=None):
        assert (os.environ["HVD3_A"], os.environ["HVD3_B"]) == ("new", "b")
        assert "HVD3_C" not in os.environ
    assert os.environ["HVD3_A"] == "old" and "HVD3_B" not in os.environ
    with pytest.raises(KeyError):
        with env(HVD3_B="b"):
            raise KeyError("inside")
    assert "HVD3_B" not in os.environ
    # is_version_greater_equal_than: PEP 440, a major.minor.patch target, strings only.
    assert is_version_greater_equal_than("2.21.0", "2.6.0")
    assert not is_version_greater_equal_than("2.6.0rc1", "2.6.0")
    assert is_version_greater_equal_than("2.6.0", "2.6.0")
    with pytest.raises(ValueError, match="major.minor.patch"):
        is_version_greater_equal_than("2.6.0", "2.6")
    with pytest.raises(ValueError, match="two strings"):
        is_version_greater_equal_than(2.6, "2.6.0")
    assert extension_available("mxnet") is False
    assert extension_available("torch") == (importlib.util.find_spec("torch") is not None)
    assert split_list(list(range(5)), 3) == [[0, 1], [2, 3], [4]]


def test_horovod_runner_env_reads_the_launchers_rank_and_size(served, monkeypatch):
    from horovod.runner.common.util.env import get_env_rank_and_size, is_exportable
    import hvdlite.runner.env
    import horovod.runner.common.util.env as served_env
    assert served_env is hvdlite.runner.env
    for name in ("HOROVOD_RANK", "HOROVOD_SIZE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                 "PMI_RANK", "PMI_SIZE"):
        monkeypatch.delenv(name, raising=False)
    assert get_env_rank_and_size() == (0, 1)
    monkeypatch.setenv("PMI_RANK", "3")
    monkeypatch.setenv("PMI_SIZE", "4")
    assert get_env_rank_and_size() == (3, 4)
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")   # Open MPI's come before PMI's
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    assert get_env_rank_and_size() == (1, 2)
    monkeypatch.setenv("HOROVOD_RANK", "5")           # half a pair is an error
    with pytest.raises(RuntimeError, match="only one of HOROVOD_RANK and HOROVOD_SIZE"):
        get_env_rank_and_size()
    assert is_exportable("PATH") and not is_exportable("CUDA_VISIBLE_DEVICES")
    assert not is_exportable("BASH_FUNC_module%%") and not is_exportable("HOROVOD_SECRET_KEY")


def test_horovod_package_is_empty_and_says_what_is_missing(served):
    import horovod
    assert horovod.__path__ == []
    with pytest.raises(AttributeError, match="start the job with hvdlite-run"):
        horovod.run
    with pytest.raises(ImportError, match="cannot import name 'run' from 'horovod'"):
        from horovod import run  # noqa: F401
    with pytest.raises(AttributeError, match="hvdlite serves only the modules listed"):
        horovod.common_helpers


@pytest.mark.parametrize("name, unserved, message", [
    ("horovod.spark", "horovod.spark", "hvdlite has no Spark integration"),
    ("horovod.spark.keras", "horovod.spark", "hvdlite has no Spark integration"),
    ("horovod.mxnet", "horovod.mxnet", "hvdlite has no MXNet adapter"),
    ("horovod.runner.common.util.secret", "horovod.runner.common.util.secret",
     "hvdlite serves no module by that name"),
    ("horovod.runner.launch", "horovod.runner.launch", "hvdlite serves no module by that name"),
    # an hvdlite module Horovod has no counterpart of is not served under a Horovod name
    ("horovod.torch.distributed", "horovod.torch.distributed",
     "hvdlite serves no module by that name"),
])
def test_unserved_modules_fail_to_import_with_a_reason(served, name, unserved, message):
    if name.startswith("horovod.torch"):
        pytest.importorskip("torch")
    with pytest.raises(ModuleNotFoundError, match=message) as caught:
        importlib.import_module(name)
    assert caught.value.name == unserved   # the first module on the way that is not served
    assert f"No module named {unserved!r}" in str(caught.value)
    assert "hvdlite.horovod_names.MODULES" in str(caught.value)


def test_in_thread_runs_the_target_and_checks_args():
    from hvdlite.runner.threads import in_thread
    seen = []
    thread = in_thread(seen.append, ("x",), name="t")
    thread.join(10)
    assert seen == ["x"] and thread.daemon and thread.name == "t"
    with pytest.raises(TypeError, match=r"for one argument write \(arg,\)"):
        in_thread(seen.append, "x")


def test_install_refuses_after_a_real_horovod_was_imported(monkeypatch):
    meta_path = list(sys.meta_path)
    monkeypatch.setitem(sys.modules, "horovod", type(sys)("horovod"))
    try:
        with pytest.raises(HvdliteError, match="Horovod was imported already"):
            horovod_names.install()
        assert not horovod_names.installed()
    finally:
        sys.meta_path[:] = meta_path


# ---------------------------------------------------------------------------------------
# start-up: the installed .pth, with a real (fake) Horovod on the path

@pytest.fixture
def real_horovod(tmp_path):
    """A directory holding a stand-in for an installed Horovod (horovod, horovod.torch)."""
    for package in ("horovod", "horovod/torch"):
        os.makedirs(tmp_path / package)
        (tmp_path / package / "__init__.py").write_text("REAL_HOROVOD = True\n")
    return tmp_path


def _python(code, path, **env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("HVDLITE_")}
    env.update(PYTHONPATH=str(path), OMP_NUM_THREADS="1", **env_extra)
    proc = subprocess.run(["timeout", "--kill-after=10", str(HARD_TIMEOUT), sys.executable,
                           "-c", code], env=env, cwd=str(path), capture_output=True, text=True)
    assert proc.returncode not in (124, 137), f"timed out\n{proc.stderr}"
    return proc


@pytest.mark.parametrize("value, hvdlite_loaded", [(None, False), ("", False), ("0", True),
                                                    ("off", True)])
def test_not_asked_a_real_horovod_is_left_alone(real_horovod, value, hvdlite_loaded):
    # Unset or empty, nothing of hvdlite runs; "0" is read by hvdlite's settings at the first
    # horovod import (Note [horovod names]), which then goes on to the real Horovod.
    extra = {} if value is None else {horovod_names.VARIABLE: value}
    proc = _python("import sys, horovod.torch as hvd; assert hvd.REAL_HOROVOD; "
                   "print('real', 'hvdlite' in sys.modules)", real_horovod, **extra)
    assert proc.returncode == 0 and proc.stdout.split() == ["real", str(hvdlite_loaded)], proc.stderr
    assert proc.stderr == "", proc.stderr


def test_asked_nothing_loads_before_the_first_horovod_import(real_horovod):
    proc = _python("import sys; print('hvdlite' in sys.modules)", real_horovod,
                   **{horovod_names.VARIABLE: "1"})
    assert proc.returncode == 0 and proc.stdout.split() == ["False"], proc.stderr


@pytest.mark.parametrize("value", ["1", "true", "YES"])
def test_asked_hvdlite_s_names_win_over_a_real_horovod(real_horovod, value):
    pytest.importorskip("torch")
    proc = _python("import horovod, horovod.torch as hvd, hvdlite.torch\n"
                   "assert hvd is hvdlite.torch and not hasattr(horovod, 'REAL_HOROVOD')\n"
                   "assert hvd.allreduce is hvdlite.torch.allreduce\n"
                   "print('served', hvd.__name__)",
                   real_horovod, **{horovod_names.VARIABLE: value})
    assert proc.returncode == 0 and proc.stdout.strip() == "served hvdlite.torch", proc.stderr


def test_a_bad_value_is_one_line_naming_the_variable(real_horovod):
    proc = _python("import horovod; print('real' if horovod.REAL_HOROVOD else '?')",
                   real_horovod, **{horovod_names.VARIABLE: "maybe"})
    assert proc.returncode == 0 and proc.stdout.strip() == "real", proc.stderr
    assert proc.stderr.splitlines() == [
        "hvdlite: Horovod's names are not served: environment variable "
        "HVDLITE_HOROVOD_NAMES='maybe' is not a boolean (1/0, true/false, yes/no, on/off)"]


# ---------------------------------------------------------------------------------------
# an unmodified Horovod program at 2 ranks

def _check_ranks(output, np_=2):
    lines = [line for line in output.splitlines() if "module=" in line]
    assert len(lines) == np_, output
    for r in range(np_):
        assert any(f"module=hvdlite.torch rank={r} size={np_} sum=3 " in line
                   for line in lines), output
    weights = {line.split("weights=")[1] for line in lines}
    assert len(weights) == 1, output   # the same averaged step on every rank


def test_unmodified_torch_program_under_hvdlite_run():
    pytest.importorskip("torch")
    cmd = ["timeout", "--kill-after=10", str(HARD_TIMEOUT), sys.executable, "-m",
           "hvdlite.runner", "--horovod", "-np", "2", sys.executable, WORKER]
    env = {k: v for k, v in mpi_env().items() if not k.startswith("HVDLITE_")}

    def launch():
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        return proc, proc.stdout
    proc = run_once_more_if_mpi_never_started(launch)
    assert proc.returncode == 0, proc.stdout[-20000:]
    _check_ranks(proc.stdout)


def test_unmodified_torch_program_under_plain_mpirun():
    pytest.importorskip("torch")
    mpirun, dialect = mpi()
    env = {k: v for k, v in mpi_env().items() if not k.startswith("HVDLITE_")}
    env[horovod_names.VARIABLE] = "1"
    cmd = ["timeout", "--kill-after=10", str(HARD_TIMEOUT), mpirun, "-np", "2",
           *dialect.oversubscribe(), *dialect.no_binding(),
           *dialect.forward_env([horovod_names.VARIABLE], env), sys.executable, WORKER]

    def launch():
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        return proc, proc.stdout
    proc = run_once_more_if_mpi_never_started(launch)
    assert proc.returncode == 0, proc.stdout[-20000:]
    _check_ranks(proc.stdout)
