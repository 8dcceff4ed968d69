"""TF1-style graphs: independent collectives that TensorFlow may start in different orders
on different ranks, with fewer inter-op threads than collectives, finish instead of
deadlocking (tests/workers/tf_graph_order.py). Fails (after the stall shutdown time)
without the chaining in hvdlite.tensorflow's ``cross``."""
import pytest

from mpi_launch import run_mpi

pytestmark = pytest.mark.timeout(180)


def test_tf1_graph_collectives_in_different_orders_do_not_deadlock():
    proc = run_mpi(2, "workers/tf_graph_order.py", timeout=150, check=False,
                   env={"HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "30"})
    assert proc.stdout.count("graph order ok") == 2, proc.stdout[-5000:]
