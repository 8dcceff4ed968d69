"""The stall inspector at 3 ranks: the warning names the tensor, the ranks that submitted it
and the ranks that have not; HVDLITE_STALL_SHUTDOWN_TIME_SECONDS ends the job with that
message as the error on every rank. The warning is tested for a tensor negotiated on the
cached path, the shutdown for one that goes through the coordinator."""
import re

from mpi_launch import run_mpi

STALL = r"'fc\.weight' waited \d+ s: ranks 0, 2 submitted it; rank 1 has not"


def test_stall_warning_names_submitting_and_missing_ranks():
    proc = run_mpi(3, "workers/core_stall.py", "warn",
                   env={"HVDLITE_STALL_CHECK_TIME_SECONDS": "1"}, timeout=120)
    warnings = [l for l in proc.stdout.splitlines() if "warning: stall" in l]
    assert warnings and all(l.startswith("[hvdlite rank 0]") for l in warnings), proc.stdout
    assert re.search(STALL, warnings[0]), warnings
    assert proc.stdout.count("done") == 3, proc.stdout


def test_stall_shutdown_ends_the_job_on_every_rank_with_the_message():
    # The HOROVOD_* alias is accepted; the HVDLITE_* name wins over it.
    proc = run_mpi(3, "workers/core_stall.py", "shutdown",
                   env={"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "500",
                        "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS": "2"}, timeout=120)
    for rank in range(3):
        line = next((l for l in proc.stdout.splitlines() if l.startswith(f"rank {rank} stopped:")), None)
        assert line, proc.stdout
        assert "HVDLITE_STALL_SHUTDOWN_TIME_SECONDS (2 s)" in line and re.search(STALL, line), line
