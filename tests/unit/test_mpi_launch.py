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


class _Proc:
    def __init__(self, returncode):
        self.returncode = returncode


def _launches(*outputs):
    """A launch() that returns the given (returncode, output) pairs in turn, and its call log."""
    calls = []

    def launch():
        returncode, output = outputs[len(calls)]
        calls.append(output)
        return _Proc(returncode), output
    return launch, calls


PMIX_FAILURE = """--------------------------------------------------------------------------
The PMIx server's listener thread failed to start. We cannot
continue.
--------------------------------------------------------------------------
"""


def test_an_mpirun_that_never_started_is_launched_once_more():
    launch, calls = _launches((213, PMIX_FAILURE), (0, "[0]: ok\n"))
    assert mpi_launch.run_once_more_if_mpi_never_started(launch).returncode == 0
    assert len(calls) == 2


def test_a_second_start_failure_is_the_result():
    launch, calls = _launches((213, PMIX_FAILURE), (213, PMIX_FAILURE), (0, ""))
    assert mpi_launch.run_once_more_if_mpi_never_started(launch).returncode == 213
    assert len(calls) == 2


def test_a_failing_rank_is_not_launched_again():
    launch, calls = _launches((1, OUTPUT), (0, ""))
    assert mpi_launch.run_once_more_if_mpi_never_started(launch).returncode == 1
    assert len(calls) == 1
