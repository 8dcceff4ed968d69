"""The core's public API at 1, 2 and 3 ranks (3 exercises the ring with a size that is not a
power of two), fusion on and off, and every error case. Each launch has a hard timeout."""
import importlib.util
import os
import subprocess
import sys

import pytest

from mpi_launch import run_mpi


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_collectives(np_):
    out = run_mpi(np_, "workers/core_collectives.py", timeout=240).stdout
    assert "ALL OK" in out


@pytest.mark.parametrize("np_,env", [
    (2, {"HVDLITE_FUSION_THRESHOLD": "0"}),
    (3, {"HVDLITE_FUSION_THRESHOLD": "0"}),
    # Tiny fusion buffer and ring pieces: many batches, many pieces per ring step.
    # (The ring itself: at one host shared memory would take every all-reduce.)
    (3, {"HVDLITE_FUSION_THRESHOLD": "1000", "HVDLITE_RING_PIECE_BYTES": "100",
         "HVDLITE_SHM_ALLREDUCE_MIN_BYTES": "0"}),
    # No response cache: every tensor goes through the coordinator.
    (2, {"HVDLITE_CACHE_CAPACITY": "0"}),
    # All-reduces in pieces of 1000 bytes (Note [pipelined staging]), through shared memory
    # and through the ring.
    (2, {"HVDLITE_PIPELINE_PIECE_BYTES": "1000"}),
    (2, {"HVDLITE_PIPELINE_PIECE_BYTES": "1000", "HVDLITE_SHM_ALLREDUCE_MIN_BYTES": "0"}),
])
def test_collectives_engine_settings(np_, env):
    out = run_mpi(np_, "workers/core_collectives.py", env=env, timeout=240).stdout
    assert "ALL OK" in out


@pytest.mark.parametrize("np_", [2, 3])
def test_errors(np_):
    out = run_mpi(np_, "workers/core_errors.py", timeout=180).stdout
    assert out.count("ALL OK") == np_


def test_loads_the_mpi_library_it_chose():
    """init() loads exactly the libmpi hvdlite.mpi_library chose, and no other."""
    code = ("import hvdlite, os; from hvdlite import mpi_library; hvdlite.init(); "
            "maps = open('/proc/self/maps').read().split(); "
            "libs = {os.path.realpath(p) for p in maps if 'libmpi.so' in p or 'libmpi_abi.so' in p}; "
            "print(os.path.realpath(mpi_library.load()['library'])); print(*libs)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split("\n")
    chosen, libs = out[0], set(out[1].split())
    assert libs == {chosen}, (chosen, libs)


def test_ranks_with_different_settings_fail_init():
    out = run_mpi(2, "workers/core_settings_mismatch.py", timeout=120).stdout
    assert out.count("refused") == 2, out


def test_process_sets():
    out = run_mpi(3, "workers/core_process_sets.py", timeout=240).stdout
    assert out.count("ALL OK") == 3, out


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_small_allreduce_paths(np_):
    out = run_mpi(np_, "workers/core_small_paths.py", timeout=180).stdout
    assert out.count("ALL OK") == np_


def _torch_installed():
    # tests/torch would pass for torch as a namespace package where torch is not installed
    # (the other MPIs' environments): look for the real package.
    spec = importlib.util.find_spec("torch")
    return spec is not None and spec.origin not in (None, "namespace")


@pytest.mark.skipif(not _torch_installed(), reason="the worker uses torch (bfloat16)")
@pytest.mark.parametrize("np_", [2, 3, 4])
def test_min_max_propagate_nan(np_):
    """NaN at any rank in any element comes out NaN there, bitwise equal on every rank: at 2
    ranks through the merged round, the exchange, the ring and shared memory (the settings cut
    the paths by size, see the worker), at 3 and 4 through the ring; reduce-scatter too."""
    env = {"HVDLITE_EXCHANGE_MAX_BYTES": 1024, "HVDLITE_SHM_ALLREDUCE_MIN_BYTES": 262144}
    out = run_mpi(np_, "workers/nan_min_max.py", env=env, timeout=240).stdout
    assert out.count(f"nan_min_max OK at {np_} ranks") == np_, out


@pytest.mark.skipif(not _torch_installed(), reason="the worker uses torch (bfloat16)")
def test_min_max_propagate_nan_in_pieces():
    # At 2 ranks batches are reduced in pieces (here of 512 bytes): NaN still wins, alike on
    # both ranks, whichever rank reduces each piece.
    env = {"HVDLITE_EXCHANGE_MAX_BYTES": 1024, "HVDLITE_SHM_ALLREDUCE_MIN_BYTES": 262144,
           "HVDLITE_PIPELINE_PIECE_BYTES": 512}
    out = run_mpi(2, "workers/nan_min_max.py", env=env, timeout=240).stdout
    assert out.count("nan_min_max OK at 2 ranks") == 2, out
