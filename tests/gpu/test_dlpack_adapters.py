"""The TensorFlow and JAX adapters of src/hvdlite/convert/dlpack_arrays.py: on host arrays here
(workers/dlpack_adapters_host.py); on a GPU, workers/gpu_frameworks_cuda.py (the device
check runs it; skipped here without a GPU that TensorFlow or JAX sees)."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from mpi_launch import run_mpi  # noqa: E402

pytest.importorskip("tensorflow")
pytest.importorskip("jax")


def test_adapters_write_fresh_framework_arrays():
    proc = run_mpi(2, "workers/dlpack_adapters_host.py", timeout=240)
    assert proc.stdout.count("checks passed") == 2 and "0 checks" not in proc.stdout, proc.stdout


def _framework_gpus():
    import jax
    import tensorflow as tf
    try:
        jax_gpus = [d for d in jax.devices() if d.platform == "gpu"]
    except RuntimeError:
        jax_gpus = []
    return bool(tf.config.list_physical_devices("GPU") or jax_gpus)


@pytest.mark.skipif(not _framework_gpus(), reason="neither TensorFlow nor JAX sees a GPU")
def test_framework_gpu_arrays():
    proc = run_mpi(2, "workers/gpu_frameworks_cuda.py", timeout=300)
    assert proc.stdout.count("checks passed") == 2, proc.stdout
