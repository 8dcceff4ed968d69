"""Shared-memory all-reduce at 3 and 4 ranks on one host (oversubscribed on a 2-core machine,
so its waits must yield): exact against numpy, and the transport's counters show the path was
taken (copies and rounds as the algorithm counts them), or not when the setting turns it off.
Small all-reduces riding in the negotiation round (workers/board_allreduce.py); all-gather,
broadcast and reduce-scatter through the same area (workers/shm_collectives_nranks.py). C++ unit
tests at 2-8 ranks: csrc/tests/test_shm_allreduce_nranks.cc, test_board_allreduce.cc,
test_shm_collectives_nranks.cc."""
import pytest

from mpi_launch import run_mpi


@pytest.mark.parametrize("np_", [3, 4])
def test_shm_allreduce_at_n_ranks(np_):
    out = run_mpi(np_, "workers/shm_allreduce_nranks.py", "on", timeout=300).stdout
    assert f"shm_allreduce_nranks on OK at {np_} ranks" in out, out


def test_shm_allreduce_turned_off():
    out = run_mpi(3, "workers/shm_allreduce_nranks.py", "off",
                  env={"HVDLITE_SHM_ALLREDUCE_MIN_BYTES": "0"}, timeout=300).stdout
    assert "shm_allreduce_nranks off OK at 3 ranks" in out, out


@pytest.mark.parametrize("np_", [3, 4])
def test_small_allreduce_rides_the_negotiation_round(np_):
    # Up to 4 KiB ride here (the tensors go up to 4096 bytes); the default is smaller.
    out = run_mpi(np_, "workers/board_allreduce.py", "on",
                  env={"HVDLITE_BOARD_ALLREDUCE_MAX_BYTES": "4096"}, timeout=300).stdout
    assert f"board_allreduce on OK at {np_} ranks" in out, out


def test_small_allreduce_ride_turned_off():
    out = run_mpi(3, "workers/board_allreduce.py", "off",
                  env={"HVDLITE_BOARD_ALLREDUCE_MAX_BYTES": "0"}, timeout=300).stdout
    assert "board_allreduce off OK at 3 ranks" in out, out


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_allgather_broadcast_reducescatter_through_shared_memory(np_):
    out = run_mpi(np_, "workers/shm_collectives_nranks.py", "on", timeout=300).stdout
    assert f"shm_collectives_nranks on OK at {np_} ranks" in out, out


@pytest.mark.parametrize("np_", [2, 3])
def test_shared_memory_collectives_turned_off(np_):
    out = run_mpi(np_, "workers/shm_collectives_nranks.py", "off",
                  env={"HVDLITE_SHM_COLLECTIVES": "0"}, timeout=300).stdout
    assert f"shm_collectives_nranks off OK at {np_} ranks" in out, out
