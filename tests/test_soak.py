"""Random collectives at 3 ranks, every result checked against numpy, memory sampled for
growth. Short in CI; `mpirun -np 3 python tests/workers/core_soak.py --minutes 10` by hand."""
from mpi_launch import run_mpi


def test_soak_random_collectives_at_three_ranks():
    out = run_mpi(3, "workers/core_soak.py", "--seconds", "15", timeout=180).stdout
    assert out.count("ALL OK") == 3, out
    assert out.count("collectives in") == 3, out
