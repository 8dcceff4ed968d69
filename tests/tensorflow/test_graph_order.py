"""TF1-style graphs: independent collectives that TensorFlow may start in different orders
on different ranks, with fewer inter-op threads than collectives, finish instead of
deadlocking (tests/workers/tf_graph_order.py; fails after the stall shutdown time if a TF1
collective waits in the op that submits it); and fetching one collective runs only it
(tests/workers/tf_graph_fetch.py; Note [TF1 collectives: submit, then wait in a critical
section] in src/hvdlite/tensorflow/mpi_ops.py)."""
import pytest

from mpi_launch import run_mpi

pytestmark = pytest.mark.timeout(180)


def test_tf1_graph_collectives_in_different_orders_do_not_deadlock():
    proc = run_mpi(2, "workers/tf_graph_order.py", timeout=150, check=False,
                   env={"HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "30"})
    assert proc.stdout.count("graph order ok") == 2, proc.stdout[-5000:]


def test_tf1_fetching_one_collective_runs_only_it():
    proc = run_mpi(2, "workers/tf_graph_fetch.py", timeout=120, check=False,
                   env={"HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "30"})
    assert proc.stdout.count("graph fetch ok") == 2, proc.stdout[-5000:]
