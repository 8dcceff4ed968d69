"""hvdlite.keras DistributedOptimizer(process_set=...) at 3 ranks on the TensorFlow backend
(tests/workers/keras_process_sets.py): the set's members match one process training on the
whole batches; the rank outside the set is refused and works on independently."""
import re

import pytest

from mpi_launch import run_mpi

pytestmark = pytest.mark.timeout(300)


def test_keras_optimizer_on_a_process_set():
    pytest.importorskip("tensorflow")
    out = run_mpi(3, "workers/keras_process_sets.py", timeout=180,
                  env={"KERAS_BACKEND": "tensorflow"}).stdout
    assert out.count("keras process sets ok") == 3, out[-5000:]
    errors = [float(e) for e in re.findall(r"max relative weight error (\S+)", out)]
    assert len(errors) == 2 and max(errors) < 1e-5, out[-3000:]
    assert out.count("sharded, local SGD and PowerSGD over the set ok") == 2, out[-5000:]
