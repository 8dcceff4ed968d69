"""hvdlite.keras on every Keras backend (tensorflow, torch, jax): model.fit at 2 and 3
ranks ends with the weights of one process on the global batch (SGD with momentum, Adam,
backward_passes_per_step=2), identical on every rank after every epoch; collectives,
callbacks, compression, save/load and errors; the digits example; unsupported backends."""
import os
import re
import subprocess
import sys

import pytest

from mpi_launch import mpi_env, run_mpi

pytestmark = pytest.mark.timeout(420)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("np_", [2, 3])
def test_fit_matches_single_process(keras_backend, np_):
    out = run_mpi(np_, "workers/keras_train.py", timeout=400,
                  env={"KERAS_BACKEND": keras_backend}).stdout
    for r in range(np_):
        assert f"keras_train: {keras_backend} rank {r} OK" in out, out[-5000:]
    errors = [float(x) for x in re.findall(r"max relative weight error (\S+)", out)]
    assert len(errors) == 8 and max(errors) < 1e-5, out[-3000:]


def test_collectives_callbacks_compression_save_load(keras_backend):
    out = run_mpi(2, "workers/keras_misc.py", timeout=400,
                  env={"KERAS_BACKEND": keras_backend}).stdout
    for r in range(2):
        assert f"keras_misc: {keras_backend} rank {r} OK" in out, out[-5000:]


def test_mismatched_models_fail_fast_with_named_error(keras_backend):
    proc = run_mpi(2, "workers/keras_mismatch.py", timeout=180, check=False,
                   env={"KERAS_BACKEND": keras_backend})
    out = proc.stdout
    assert proc.returncode not in (0, 124, 137), out[-5000:]
    assert "UNREACHABLE" not in out
    assert "HvdliteMismatchError" in out and "DistributedSGD.0" in out, out[-5000:]
    assert "sequential/dense/kernel" in out, out[-5000:]


@pytest.mark.parametrize("backend", ["torch", "jax"])  # tensorflow: tests/tensorflow
def test_digits_example_reaches_accuracy(backend):
    pytest.importorskip(backend)
    out = run_mpi(2, os.path.join(REPO, "examples", "keras_digits.py"), timeout=400,
                  env={"KERAS_BACKEND": backend}).stdout
    acc = re.findall(r"test accuracy: ([0-9.]+)", out)
    assert len(acc) == 1, out[-5000:]        # printed by rank 0 only
    assert float(acc[0]) >= 0.95, out[-5000:]
    assert f"Keras backend {backend}" in out, out[-5000:]


def test_unsupported_backend_fails_at_init_naming_it():
    proc = subprocess.run(
        [sys.executable, "-c", "import hvdlite.keras as hvd; hvd.init()"],
        env=mpi_env({"KERAS_BACKEND": "numpy"}), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "HvdliteInvalidArgumentError" in proc.stderr, proc.stderr[-3000:]
    assert "'numpy'" in proc.stderr and "tensorflow, torch, jax" in proc.stderr, \
        proc.stderr[-3000:]


def test_tensorflow_keras_needs_the_tensorflow_backend():
    pytest.importorskip("tensorflow")
    proc = subprocess.run(
        [sys.executable, "-c", "import hvdlite.tensorflow.keras"],
        env=mpi_env({"KERAS_BACKEND": "torch"}), capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert "ImportError" in proc.stderr and "hvdlite.keras" in proc.stderr, proc.stderr[-3000:]
