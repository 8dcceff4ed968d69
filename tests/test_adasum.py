"""Adasum (op=hvd.Adasum), as Horovod defines it: the core's algorithm in C++ unit tests
(csrc/tests/test_adasum.cc, 1-8 ranks as threads, every float dtype), and here every adapter
at 2 and 4 ranks against a float64 numpy reference of the paper's formula, fusion, process
sets, and the rank counts Horovod refuses (3 ranks). Each launch has a hard timeout."""
import pytest

from mpi_launch import run_mpi


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_core(np_):
    out = run_mpi(np_, "workers/adasum_core.py", timeout=240).stdout
    assert out.count("ALL OK") == np_


def test_core_unfused_and_uncached():
    """No fusion and no response cache: every Adasum goes alone through the coordinator."""
    out = run_mpi(2, "workers/adasum_core.py", timeout=240,
                  env={"HVDLITE_FUSION_THRESHOLD": "0", "HVDLITE_CACHE_CAPACITY": "0"}).stdout
    assert out.count("ALL OK") == 2


@pytest.mark.parametrize("np_", [2, 3, 4])
def test_torch(np_):
    pytest.importorskip("torch")
    out = run_mpi(np_, "workers/adasum_torch.py", timeout=300).stdout
    assert out.count("ALL OK") == np_


@pytest.mark.parametrize("np_", [2, 4])
def test_tensorflow(np_):
    pytest.importorskip("tensorflow")
    out = run_mpi(np_, "workers/adasum_tf.py", timeout=400).stdout
    assert out.count("adasum_tf: rank") == np_ and out.count(" OK (") == np_, out[-3000:]


@pytest.mark.parametrize("backend", ["tensorflow", "torch", "jax"])
def test_keras(backend):
    pytest.importorskip("keras")
    pytest.importorskip(backend)
    out = run_mpi(2, "workers/adasum_keras.py", timeout=400, env={"KERAS_BACKEND": backend}).stdout
    assert out.count(f"adasum_keras: {backend} rank") == 2, out[-3000:]


@pytest.mark.parametrize("np_", [2, 4])
def test_cuda_tensors_staged_through_host(np_):
    """Against the stand-in CUDA runtime and NCCL (tests/gpu/standins), a GPU per rank."""
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu"))
    from standins.build import cudart_standin, nccl_standin
    env = {"HVDLITE_CUDA_RUNTIME_LIBRARY": cudart_standin(), "HVDLITE_NCCL_LIBRARY": nccl_standin(),
           "CUDA_STANDIN_DEVICES": str(np_), "CUDA_STANDIN_COPY_DELAY_US": "2000"}
    out = run_mpi(np_, "workers/gpu_standin_adasum.py", timeout=300, env=env).stdout
    assert out.count("checks passed") == np_, out[-3000:]
