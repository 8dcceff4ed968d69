"""A failed grouped all-reduce releases every member, in numpy, torch and TensorFlow:
RSS stays flat over 200 caught group failures at 2 ranks (tests/workers/group_failure_rss.py)."""
import importlib.util
import re

import pytest

from mpi_launch import run_mpi

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("framework", ["numpy", "torch", "tensorflow"])
def test_rss_flat_over_failed_groups(framework):
    if framework != "numpy" and importlib.util.find_spec(framework) is None:
        pytest.skip(f"{framework} is not installed")
    out = run_mpi(2, "workers/group_failure_rss.py", framework, 200, timeout=240).stdout
    for r in range(2):
        assert f"group_failure_rss {framework}: rank {r} OK" in out, out[-5000:]
    growth = [float(b) - float(a) for a, b in re.findall(r"RSS (\S+) -> (\S+) MiB", out)]
    assert len(growth) == 2 and max(growth) < 64, out[-3000:]
