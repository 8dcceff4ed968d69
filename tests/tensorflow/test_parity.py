"""Horovod's TensorFlow API beyond the basic collectives (tests/workers/tf_parity.py)."""
import pytest

from mpi_launch import run_mpi

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("np_", [2, 3])
def test_tf_parity(np_):
    out = run_mpi(np_, "workers/tf_parity.py", timeout=240).stdout
    for r in range(np_):
        assert f"tf_parity: rank {r} OK" in out, out[-5000:]
