"""examples/keras_digits.py reaches the required accuracy at 2 ranks and only rank 0
prints; examples/keras_bench.py runs its hvdlite configuration."""
import os
import re

import pytest

from mpi_launch import run_mpi

pytestmark = pytest.mark.timeout(300)
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_keras_digits_two_ranks():
    pytest.importorskip("sklearn")
    out = run_mpi(2, os.path.join(REPO, "examples", "keras_digits.py"), timeout=240).stdout
    acc = re.findall(r"test accuracy: ([0-9.]+)", out)
    assert len(acc) == 1, out[-5000:]        # printed by rank 0 only
    assert float(acc[0]) >= 0.95, out[-5000:]
    assert out.count("Epoch 1/") == 1, out[-5000:]   # one progress bar, rank 0's


def test_keras_bench_hvdlite_mode_runs():
    pytest.importorskip("sklearn")
    out = run_mpi(2, os.path.join(REPO, "examples", "keras_bench.py"), "--mode", "hvdlite",
                  "--steps", "20", "--warmup", "5", timeout=240).stdout
    assert re.search(r'RESULT \{"config": "hvdlite-2"', out), out[-5000:]
