"""hvdlite.tensorflow with process_set= at 3 ranks (tests/workers/tf_process_sets.py).

Overlapping ([0, 2], [1, 2]) and disjoint work; every collective kind eagerly and inside
tf.function, gradients, broadcast_ and DistributedGradientTape(process_set=...), checked
against numpy references; the rank outside a set gets a tf.errors.OpError naming the set.
"""
import pytest

from mpi_launch import run_mpi

pytestmark = pytest.mark.timeout(300)


def test_tensorflow_process_sets_3_ranks():
    out = run_mpi(3, "workers/tf_process_sets.py", timeout=180).stdout
    assert out.count("tensorflow process sets ok") == 3, out[-5000:]
