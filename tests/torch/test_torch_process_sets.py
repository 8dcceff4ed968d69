"""hvdlite.torch with process_set= at 3 ranks (tests/workers/torch_process_sets.py).

Overlapping ([0, 2], [1, 2]) and disjoint work, a set added and removed while the job runs,
every collective kind, autograd and DistributedOptimizer(process_set=...), checked against
references computed from the ranks' known inputs; the rank outside a set gets a clear error.
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


def test_torch_process_sets_3_ranks():
    proc = run_mpi(3, "workers/torch_process_sets.py", timeout=280,
                   env={"HVDLITE_DYNAMIC_PROCESS_SETS": "1"})
    assert proc.stdout.count("torch process sets ok") == 3, proc.stdout[-5000:]
