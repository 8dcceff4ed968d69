"""CUDA tensors through the core, in CI without a GPU: against a stand-in CUDA runtime
(standins/cudart_standin.cc) whose streams really run later than they are issued, so that a
missing event wait shows up as wrong data. First the stand-in itself must be able to fail;
then the core at 2 and 3 ranks (workers/gpu_standin_core.py)."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

from mpi_launch import run_mpi  # noqa: E402
from standins.build import cudart_standin, nccl_standin  # noqa: E402


def _fault_tolerant():
    from hvdlite import mpi_library
    return mpi_library.load()["fault_tolerant"]


@pytest.fixture(scope="module")
def standin():
    return cudart_standin()


@pytest.fixture(scope="module")
def nccl_env(standin):
    # A stand-in GPU per rank, so that NCCL is the default path (as on one GPU per rank).
    return {"HVDLITE_CUDA_RUNTIME_LIBRARY": standin, "HVDLITE_NCCL_LIBRARY": nccl_standin(),
            "CUDA_STANDIN_DEVICES": "3", "CUDA_STANDIN_COPY_DELAY_US": "2000",
            "HVDLITE_DYNAMIC_PROCESS_SETS": "1"}


def _in_subprocess(code, env):
    proc = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout
    return proc.stdout


def test_standin_catches_a_copy_not_ordered_after_its_producer(standin):
    # Without the event wait the copy on stream B runs before A's slow fill: stale data.
    # With it, fresh data. The stand-in is what makes the core's tests able to fail.
    out = _in_subprocess(f"""
import ctypes, numpy as np, sys
sys.path.insert(0, {HERE!r})
from standins.cuda_array import DeviceArray, StandinRuntime
rt = StandinRuntime({standin!r})
a, b = rt.stream(), rt.stream()
for ordered in (False, True):
    x = DeviceArray.from_numpy(rt, np.zeros(8, np.float32))
    rt.fill_async(x, np.full(8, 5, np.float32), 50_000, a)
    if ordered:
        e = ctypes.c_void_p()
        rt.lib.cudaEventCreateWithFlags(ctypes.byref(e), 2)
        rt.lib.cudaEventRecord(e, a)
        rt.lib.cudaStreamWaitEvent(b, e, 0)
    got = x.numpy(b)
    print(ordered, got[0])
    rt.sync(a)
""", {})
    assert out.split() == ["False", "0.0", "True", "5.0"], out


def test_standin_counts_an_event_never_waited_on(standin):
    out = _in_subprocess(f"""
import ctypes, sys
sys.path.insert(0, {HERE!r})
from standins.cuda_array import StandinRuntime
rt = StandinRuntime({standin!r})
s = rt.stream()
e = ctypes.c_void_p()
rt.lib.cudaEventCreateWithFlags(ctypes.byref(e), 2)
rt.lib.cudaEventRecord(e, s)
rt.lib.cudaEventDestroy(e)
print(rt.unwaited_events())
""", {})
    assert out.split() == ["1"], out


def test_standin_refuses_a_copy_of_the_wrong_kind(standin):
    out = _in_subprocess(f"""
import numpy as np, sys
sys.path.insert(0, {HERE!r})
from standins.cuda_array import DeviceArray, StandinRuntime
rt = StandinRuntime({standin!r})
x = DeviceArray(rt, (4,), np.float32)
host = np.zeros(4, np.float32)
print(rt.lib.cudaMemcpyAsync(host.ctypes.data, x.ptr, 16, 1, 0))  # says H2D, is D2H
print("violation" if "kind 1" in rt.violations() else "none")
""", {})
    assert out.split() == ["1", "violation"], out


@pytest.mark.parametrize("np_", [2, 3])
def test_cuda_tensors_through_the_core(standin, np_):
    proc = run_mpi(np_, "workers/gpu_standin_core.py", timeout=240,
                   env={"HVDLITE_CUDA_RUNTIME_LIBRARY": standin,
                        "CUDA_STANDIN_COPY_DELAY_US": "2000",
                        "HVDLITE_DYNAMIC_PROCESS_SETS": "1"})
    for r in range(np_):
        assert f"rank {r}:" in proc.stdout and "checks passed" in proc.stdout, proc.stdout


@pytest.mark.parametrize("np_", [2, 3])
def test_join_over_nccl(nccl_env, np_):
    # A joined rank takes part in the others' NCCL all-reduces with zeros (Note [join over
    # NCCL] in csrc/device/nccl_collectives.cc).
    proc = run_mpi(np_, "workers/gpu_standin_nccl.py", "join", timeout=240, env=nccl_env)
    for r in range(np_):
        assert re.search(rf"rank {r}: \d+ checks passed", proc.stdout), proc.stdout


@pytest.mark.parametrize("np_", [2, 3])
def test_cuda_tensors_over_nccl(nccl_env, np_):
    # Ordering, one NCCL call per fused group, broadcast, the host path for what NCCL does
    # not carry, one communicator per process set.
    # Then allgather (equal and unequal first dimensions, fused), reducescatter (even and
    # uneven splits, fused) and alltoall (splits) over NCCL, their outputs on the device.
    proc = run_mpi(np_, "workers/gpu_standin_nccl.py", "ok", timeout=240, env=nccl_env)
    for r in range(np_):
        passed = re.search(rf"rank {r}: (\d+) checks passed", proc.stdout)
        assert passed and int(passed.group(1)) >= 75, proc.stdout


def test_gpu_operations_mpi_keeps_nccl_out(nccl_env):
    proc = run_mpi(2, "workers/gpu_standin_nccl.py", "mpi", timeout=120,
                   env={**nccl_env, "HVDLITE_GPU_OPERATIONS": "mpi"})
    assert proc.stdout.count("3 checks passed") == 2, proc.stdout


def test_nccl_failure_is_an_error_on_every_rank(nccl_env):
    # Rank 1's 3rd collective fails inside the stand-in; rank 0 then waits in vain until its
    # barrier times out. Both must raise an hvdlite error naming NCCL, and nothing hangs.
    proc = run_mpi(2, "workers/gpu_standin_nccl.py", "error", timeout=120,
                   env={**nccl_env, "NCCL_STANDIN_TIMEOUT_S": "2", "NCCL_STANDIN_FAIL_RANK": "1",
                        "NCCL_STANDIN_FAIL_AT": "3"})
    for r in range(2):
        line = next((l for l in proc.stdout.splitlines() if f"rank {r} error:" in l), "")
        assert "HvdliteInternalError" in line and "NCCL" in line and "aborted" in line, proc.stdout
    assert proc.stdout.count("1 checks passed") == 2, proc.stdout


@pytest.mark.parametrize("np_", [2, 3])
def test_nccl_failure_reaches_peers_through_negotiation(nccl_env, np_):
    # The peers' own NCCL would notice only after 60 s: they must learn rank 1's failure from
    # rank 1 (negotiation), abort their communicators and raise HvdliteInternalError at once.
    proc = run_mpi(np_, "workers/gpu_standin_nccl.py", "propagate", timeout=120,
                   env={**nccl_env, "NCCL_STANDIN_TIMEOUT_S": "60", "NCCL_STANDIN_FAIL_RANK": "1",
                        "NCCL_STANDIN_FAIL_AT": "3"})
    assert proc.stdout.count("4 checks passed") == np_, proc.stdout
    assert "rank 1 stopped after a failure there" in proc.stdout, proc.stdout


def test_nccl_failure_then_rebuild_gives_a_fresh_communicator(nccl_env):
    proc = run_mpi(3, "workers/gpu_standin_nccl.py", "rebuild", timeout=120,
                   env={**nccl_env, "NCCL_STANDIN_TIMEOUT_S": "60", "NCCL_STANDIN_FAIL_RANK": "1",
                        "NCCL_STANDIN_FAIL_AT": "3"})
    assert proc.stdout.count("8 checks passed") == 3, proc.stdout


@pytest.mark.skipif(not _fault_tolerant(), reason="hvdlite built against an MPI without ULFM")
def test_lost_rank_aborts_nccl_and_elastic_rebuild_recovers(nccl_env):
    # hvdlite-run --min-np (ULFM): rank 2 dies; the survivors' communicators are aborted, their
    # request fails with HvdliteRanksLostError, and NCCL runs again on a fresh communicator.
    env = {k: v for k, v in os.environ.items() if not k.startswith("HVDLITE_")}
    env.update(nccl_env, OMP_NUM_THREADS="1", NCCL_STANDIN_TIMEOUT_S="60",
               PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.path.dirname(os.path.dirname(HERE))]))
    proc = subprocess.run(["timeout", "--kill-after=10", "180", sys.executable, "-m", "hvdlite.runner",
                           "-np", "3", "--min-np", "2", "python",
                           os.path.join(os.path.dirname(HERE), "workers", "gpu_standin_nccl.py"), "lost"],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("6 checks passed") == 2, proc.stdout + proc.stderr


def test_no_cuda_runtime_is_named(tmp_path):
    # A CUDA array with no runtime loadable: refused with what was tried, nothing hangs.
    missing = str(tmp_path / "libcudart.so.missing")
    out = _in_subprocess(f"""
import sys
sys.path.insert(0, {HERE!r})
import hvdlite as hvd
from hvdlite import _core
info = _core.device_libraries()["cuda_runtime"]
print(info["loaded"], {missing!r} in info["error"])
print(hvd.cuda_built())
""", {"HVDLITE_CUDA_RUNTIME_LIBRARY": missing})
    assert out.split() == ["False", "True", "False"], out


def _pipeline_run(standin, mode, piece_bytes, extra_env):
    env = {"HVDLITE_CUDA_RUNTIME_LIBRARY": standin, "HVDLITE_PIPELINE_PIECE_BYTES": str(piece_bytes),
           **extra_env}
    proc = run_mpi(2, "workers/gpu_standin_pipeline.py", mode, timeout=240, env=env)
    assert proc.stdout.count("checks passed") == 2, proc.stdout
    return proc.stdout


def _per_rank(stdout, key):
    return [line.split(key, 1)[1].split()[0] for line in stdout.splitlines() if key in line]


def test_pipelined_staging_is_bitwise_the_one_piece_result(standin):
    # Pieces of 300,000 bytes: no multiple of the staging's 256-byte alignment nor of any
    # tensor, so staging pieces and reduction pieces fall unevenly across tensors. A piece
    # read before its copy landed, or copied back before it was reduced, changes the digest
    # (each run also checks the exact sums against numpy).
    env = {"CUDA_STANDIN_COPY_DELAY_US": "2000"}
    whole = _per_rank(_pipeline_run(standin, "check", 0, env), "digest ")
    pieces = _per_rank(_pipeline_run(standin, "check", 300_000, env), "digest ")
    assert len(whole) == 2 and len(set(whole)) == 1, whole
    assert pieces == whole, (pieces, whole)


def test_pipelined_staging_in_lanes_is_bitwise_the_one_lane_result(standin):
    # Pieces of 4.5 MiB reduced in 3 lanes each (csrc/algorithms/shm_lanes.h) on the
    # engine's kept threads, against one piece in one lane.
    env = {"CUDA_STANDIN_COPY_DELAY_US": "2000"}
    one_lane = _pipeline_run(standin, "check", 0, {**env, "HVDLITE_SHM_LANES": "1"})
    in_lanes = _pipeline_run(standin, "check", 9 << 19, {**env, "HVDLITE_SHM_LANES": "3"})
    whole, lanes = _per_rank(one_lane, "digest "), _per_rank(in_lanes, "digest ")
    assert len(whole) == 2 and len(set(whole)) == 1, whole
    assert lanes == whole, (lanes, whole)
    assert _per_rank(one_lane, "extra lanes ") == ["0", "0"], one_lane
    # the 4.5 MiB pieces of the 10 MB case (and the float64 case) ran in 3 lanes
    assert all(int(n) >= 2 * 2 for n in _per_rank(in_lanes, "extra lanes ")), in_lanes


def test_pipelined_staging_overlaps_copies_and_reduction(standin):
    # A 16 MiB all-reduce with copies at 4 ms per MiB (64 ms each way). In one piece the
    # copy to the host, the reduction and the copy back run one after the other; in 1 MiB
    # pieces they overlap: the wall time must fall well below that serial sum.
    # Without overlap no run can beat the serial sum (the copies are the stand-in's sleeps), so
    # a pass cannot be luck; a loaded machine (CI's 2 cores) can only make a run slower, so
    # the best of up to three attempts is judged.
    env = {"CUDA_STANDIN_COPY_US_PER_MIB": "4000"}
    copies = 2 * 16 * 4.0
    seen = []
    for _ in range(3):
        serial = _pipeline_run(standin, "time", 0, env)
        piped = _pipeline_run(standin, "time", 1 << 20, env)
        one_piece = max(float(v) for v in _per_rank(serial, "device_ms "))
        pipelined = max(float(v) for v in _per_rank(piped, "device_ms "))
        host = max(float(v) for v in _per_rank(piped, "host_ms "))
        assert one_piece > copies, serial  # the stand-in really charges for the copies
        seen.append((pipelined, one_piece, host))
        if pipelined < 0.85 * (copies + host) and pipelined < 0.85 * one_piece:
            return
    raise AssertionError(f"no overlap: (pipelined, one piece, host) ms per attempt {seen}, "
                         f"copies {copies} ms")


@pytest.mark.parametrize("np_", [2, 3])
def test_framework_arrays_through_dlpack(standin, np_):
    # TensorFlow / JAX style arrays (src/hvdlite/convert/dlpack_arrays.py): the stream hand-off
    # and the sync hand-off, the consumer's kernel after the call without a host sync.
    proc = run_mpi(np_, "workers/gpu_standin_dlpack.py", "ok", timeout=240,
                   env={"HVDLITE_CUDA_RUNTIME_LIBRARY": standin, "CUDA_STANDIN_COPY_DELAY_US": "2000"})
    assert proc.stdout.count("checks passed") == np_ and "rank 0: 0 checks" not in proc.stdout, proc.stdout


@pytest.mark.parametrize("handoff", ["stream", "sync"])
def test_framework_without_its_handoff_reads_stale_data(standin, handoff):
    # The same frameworks with a hand-off that does nothing (a __dlpack__ that ignores the
    # stream, a sync that does not wait): the core reads the array before the framework's
    # kernel wrote it. What the previous test relies on is thus really checked.
    proc = run_mpi(2, "workers/gpu_standin_dlpack.py", f"broken-{handoff}", timeout=120,
                   env={"HVDLITE_CUDA_RUNTIME_LIBRARY": standin, "CUDA_STANDIN_COPY_DELAY_US": "2000"})
    assert proc.stdout.count("1 checks passed") == 2, proc.stdout
