"""Keras DistributedOptimizer with PowerSGD, top-k and fp16 with error feedback
(tests/workers/tf_keras_compression.py): identical weights on every rank, bytes per step
from the transport counters equal to each reducer's promise, training still learns."""
import re

import pytest

from mpi_launch import run_mpi

pytestmark = pytest.mark.timeout(400)


def test_keras_stateful_compression():
    pytest.importorskip("sklearn")
    out = run_mpi(2, "workers/tf_keras_compression.py", timeout=360).stdout
    assert "tf_keras_compression OK at 2 ranks" in out, out
    factors = [float(f) for f in re.findall(r"([\d.]+)x fewer\)", out)]
    assert len(factors) == 3 and factors[0] > 5 and factors[1] > 5 and factors[2] == 2.0, out
