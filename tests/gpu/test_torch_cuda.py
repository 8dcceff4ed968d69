"""hvdlite.torch on CUDA tensors, on a real GPU; skipped where torch sees none (CI). Two ranks
share one GPU (NCCL would refuse that; the core stages through pinned host memory)."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")

from mpi_launch import run_mpi  # noqa: E402


@pytest.mark.parametrize("np_", [1, 2])
def test_torch_cuda_tensors(np_):
    proc = run_mpi(np_, "workers/gpu_torch_cuda.py", timeout=300)
    for r in range(np_):
        assert f"rank {r}:" in proc.stdout and "checks passed" in proc.stdout, proc.stdout
