"""Inside a graph (a TF1 Session and a tf.function) a failed collective raises the tf.errors
class it raises eagerly, with hvdlite's message, and the job goes on
(tests/workers/tf_graph_errors.py; Note [error classes in TensorFlow graphs] in
csrc/frameworks/tensorflow/check_status_op.c)."""
import pytest

from mpi_launch import run_mpi

pytestmark = pytest.mark.timeout(240)


def test_graph_errors_keep_their_class_at_two_ranks():
    proc = run_mpi(2, "workers/tf_graph_errors.py", timeout=200, check=False)
    assert proc.stdout.count("tf graph errors: rank") == 2, proc.stdout[-6000:]
    assert "RuntimeWarning" not in proc.stdout, proc.stdout[-6000:]   # the op library loaded
