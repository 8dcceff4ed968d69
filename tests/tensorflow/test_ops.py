"""hvdlite.tensorflow collectives at 2 and 3 ranks: values for every supported dtype and
op, eagerly and inside tf.function; Horovod's gradients; clear errors naming the tensor;
sparse gradients; broadcast_variables / broadcast_object / allgather_object
(tests/workers/tf_ops.py)."""
import pytest

from mpi_launch import run_mpi

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("np_", [2, 3])
def test_tf_collectives(np_):
    out = run_mpi(np_, "workers/tf_ops.py", timeout=180).stdout
    for r in range(np_):
        assert f"tf_ops: rank {r} OK" in out, out[-5000:]
