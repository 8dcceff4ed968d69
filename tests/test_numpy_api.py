"""hvdlite's numpy API on Work objects (tests/workers/numpy_work.py) at 2 and 3 ranks."""
import pytest

from mpi_launch import run_mpi

pytestmark = pytest.mark.timeout(200)


@pytest.mark.parametrize("np_", [2, 3])
def test_numpy_work(np_):
    out = run_mpi(np_, "workers/numpy_work.py", timeout=150).stdout
    for r in range(np_):
        assert f"numpy_work: rank {r} OK" in out, out[-5000:]
