"""tests/mpi_launch.py: a failed multi-process run names the failing assertion first."""

import os

import mpi_launch

WORKER = os.path.join(mpi_launch.HERE, "workers", "torch_zero.py")

OUTPUT = f"""[1]: step 3
[1]: Traceback (most recent call last):
[1]:   File "{WORKER}", line 245, in <module>
[1]:     check(err < 1e-6, "sharded adam")
[1]:   File "{mpi_launch.HERE}/workers/worker_checks.py", line 21, in check
[1]:     raise AssertionError(f"[{{_who()}}] {{what}}")
[1]: AssertionError: [rank 1] sharded adam
--------------------------------------------------------------------------
prterun detected that one or more processes exited with non-zero status
"""


def test_the_assertion_comes_first():
    summary = mpi_launch.failure_summary(OUTPUT)
    assert summary == (f"failed: workers/torch_zero.py:245 > workers/worker_checks.py:21: "
                       f"AssertionError: [rank 1] sharded adam\n")


def test_nothing_found_adds_nothing():
    assert mpi_launch.failure_summary("killed by signal 9\n") == ""
