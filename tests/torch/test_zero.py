"""Sharded optimizer state (ZeRO-1): equivalence with the unsharded optimizer at 2 and 3 ranks,
clipping by global norm, consolidation and resharding, resuming at another size, errors.
The checks themselves are in tests/workers/torch_zero.py.
"""
import os
import sys

import pytest

pytest.importorskip("torch")

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

from mpi_launch import run_mpi  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("np_", [2, 3])
def test_sharded_equals_unsharded(np_):
    out = run_mpi(np_, "workers/torch_zero.py", "equivalence", timeout=240).stdout
    assert f"torch_zero OK at {np_} ranks" in out, out
    for kind in ("sgd_momentum", "adam", "adamw"):
        for dtype in ("float64", "float32"):
            assert f"equivalence {kind} torch.{dtype}" in out, out


def test_resume_at_another_size(tmp_path):
    path = str(tmp_path / "zero.pt")
    out = run_mpi(2, "workers/torch_zero.py", "save", path, timeout=120).stdout
    assert "saved at 2 ranks" in out, out
    out = run_mpi(3, "workers/torch_zero.py", "resume", path, timeout=120).stdout
    assert "resumed at 3 ranks from a checkpoint saved at 2" in out, out
