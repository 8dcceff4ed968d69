"""hvdlite.p2p, the framework-free point-to-point, on numpy arrays (tests/workers/p2p_numpy.py)
at 2 ranks and at 3 (with a process set); transfers waited in any order, at 128 B - 16 MiB,
through hvdlite.p2p and torch.distributed (tests/workers/p2p_wait_order.py) at 2 and 4 ranks.
The rest of the torch.distributed side: tests/torch/test_c10d.py."""
import pytest

from mpi_launch import run_mpi

pytestmark = pytest.mark.timeout(200)


@pytest.mark.parametrize("np_", [2, 3])
def test_p2p_numpy(np_):
    out = run_mpi(np_, "workers/p2p_numpy.py", timeout=120).stdout
    for r in range(np_):
        assert f"p2p numpy: rank {r} OK" in out, out[-5000:]


@pytest.mark.parametrize("np_", [2, 4])
def test_p2p_completes_in_any_wait_order(np_):
    out = run_mpi(np_, "workers/p2p_wait_order.py", timeout=180).stdout
    for r in range(np_):
        assert f"p2p wait order: rank {r} OK" in out, out[-5000:]
