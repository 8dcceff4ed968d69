"""Keras 3 adapter: training at N ranks equals single-process training on the global
batch (model.fit with SGD and Adam, train_on_batch, DistributedGradientTape, gradient
accumulation), callbacks, sparse gradients, save/load and error handling."""
import re

import pytest

from mpi_launch import run_mpi

pytestmark = pytest.mark.timeout(240)


@pytest.mark.parametrize("np_", [1, 2])
def test_keras_training_matches_single_process(np_):
    out = run_mpi(np_, "workers/tf_keras_train.py", timeout=180).stdout
    for r in range(np_):
        assert f"tf_keras_train: rank {r} OK" in out, out[-5000:]
    errors = [float(x) for x in re.findall(r"max relative weight error (\S+)", out)]
    assert len(errors) == 8 and max(errors) < 5e-3, out[-3000:]


def test_keras_callbacks_sparse_save_load_errors():
    out = run_mpi(2, "workers/tf_keras_misc.py", timeout=180).stdout
    for r in range(2):
        assert f"tf_keras_misc: rank {r} OK" in out, out[-5000:]


def test_mismatched_models_fail_fast_with_named_error():
    proc = run_mpi(2, "workers/keras_mismatch.py", "hvdlite.tensorflow.keras", timeout=90,
                   check=False, env={"KERAS_BACKEND": "tensorflow"})
    out = proc.stdout
    assert proc.returncode not in (0, 124, 137), out[-5000:]
    assert "UNREACHABLE" not in out
    assert "HvdliteMismatchError" in out and "DistributedSGD.0" in out, out[-5000:]
    assert "sequential/dense/kernel" in out, out[-5000:]
