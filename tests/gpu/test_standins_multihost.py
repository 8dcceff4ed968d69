"""Hierarchical all-reduce of CUDA tensors with NCCL within each host and MPI across hosts, as
Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE with NCCL: against the stand-in CUDA runtime and NCCL
on the fake hosts of tests/multihost/hosts.py (network namespaces; the hierarchical CPU tests'
topology), 2 and 3 hosts of 2 ranks each (workers/gpu_standin_hierarchical.py)."""
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
REPO = os.path.dirname(TESTS)
sys.path.insert(0, HERE)
sys.path.insert(0, TESTS)

from standins.build import cudart_standin, nccl_standin  # noqa: E402

hosts = pytest.importorskip("multihost.hosts", reason="needs tests/multihost/hosts.py")


@pytest.mark.parametrize("n_hosts", [2, 3])
def test_hierarchical_allreduce_nccl_within_hosts_mpi_across(n_hosts):
    reason = hosts.namespaces_unavailable_reason()
    if reason:
        pytest.skip(reason)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               HVDLITE_CUDA_RUNTIME_LIBRARY=cudart_standin(), HVDLITE_NCCL_LIBRARY=nccl_standin(),
               HVDLITE_GPU_OPERATIONS="nccl", HVDLITE_HIERARCHICAL_ALLREDUCE="1")
    with (hosts.two_hosts() if n_hosts == 2 else hosts.many_hosts(n_hosts)) as cluster:
        hostlist = ",".join(f"{name}:2" for name in cluster.names)
        argv = [sys.executable, "-m", "hvdlite.runner", "-np", str(2 * n_hosts), "-H", hostlist,
                sys.executable, os.path.join(TESTS, "workers", "gpu_standin_hierarchical.py")]
        proc = cluster.run(cluster.names[0], argv, timeout=240, env=env, cwd=REPO)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-10000:]
    assert out.count("ALL OK") == 2 * n_hosts, out[-10000:]
