"""hvdlite.torch: collectives, DistributedOptimizer equivalence, the example and the benchmark.

Multi-process checks run worker scripts (tests/workers/torch_*.py) under mpirun with a hard
timeout; a failed assertion in a worker aborts its job and shows here with the rank's
traceback. Everything is skipped when torch is not installed or the core is not built.
"""
import json
import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
REPO = os.path.dirname(TESTS)
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

from mpi_launch import mpi_env, run_mpi  # noqa: E402


def _core_available():
    try:
        from hvdlite import _core  # noqa: F401
        return True
    except Exception:
        return False


if not _core_available():
    pytest.skip("hvdlite core is not built", allow_module_level=True)

import hvdlite.torch as hvd  # noqa: E402  (importing needs no init)

pytestmark = pytest.mark.timeout(300)


def _launcher(np_, *cmd, timeout):
    """Run ``cmd`` at ``np_`` ranks through hvdlite-run (python -m hvdlite.runner)."""
    full = ["timeout", "--kill-after=10", str(timeout), sys.executable, "-m", "hvdlite.runner",
            "-np", str(np_), *cmd]
    env = {k: v for k, v in mpi_env().items() if not k.startswith("HVDLITE_")}
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(full, env=env, cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    assert proc.returncode == 0, f"{' '.join(full)} exited with {proc.returncode}\n{proc.stdout[-20000:]}"
    return proc.stdout


# ---------------------------------------------------------------------------------------
# in-process (no MPI job)

def test_builtin_compressors():
    x = torch.linspace(-2, 2, 7)
    for comp, dtype in ((hvd.Compression.fp16, torch.float16), (hvd.Compression.bf16, torch.bfloat16)):
        c, ctx = comp.compress(x)
        assert c.dtype == dtype
        back = comp.decompress(c, ctx)
        assert back.dtype == torch.float32 and torch.allclose(back, x, rtol=1e-2)
        i = torch.arange(4)
        assert comp.compress(i)[0] is i and comp.decompress(i, None) is i
        assert comp.wire_dtype in ("fp16", "bf16")
    assert hvd.Compression.none.compress(x) == (x, None)
    assert hvd.Compression.none.wire_dtype is None


def test_custom_compressor_interface():
    class Custom(hvd.Compressor):
        @staticmethod
        def compress(tensor):
            return tensor * 2, "ctx"

        @staticmethod
        def decompress(tensor, ctx):
            assert ctx == "ctx"
            return tensor / 2

    from hvdlite.policy import wire_format

    def _wire_compression(c, t):
        return wire_format(c, str(t.dtype).replace("torch.", ""))
    assert Custom.wire_dtype is None
    x = torch.ones(3)
    assert _wire_compression(Custom, x) == (None, True)          # Python-side
    assert _wire_compression(hvd.Compression.fp16, x) == ("fp16", False)   # core packs it
    assert _wire_compression(hvd.Compression.fp16, x.double()) == ("fp16", False)
    assert _wire_compression(hvd.Compression.fp16, x.half()) == (None, True)
    assert _wire_compression(hvd.Compression.bf16, torch.ones(3, dtype=torch.int32)) == (None, False)
    assert _wire_compression(hvd.Compression.none, x) == (None, False)
    with pytest.raises(NotImplementedError):
        hvd.Compressor.compress(x)


def test_horovod_names_exported():
    for name in ("init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
                 "cross_rank", "cross_size", "mpi_built", "nccl_built", "Average", "Sum",
                 "Adasum", "Min", "Max", "Product", "allreduce", "allreduce_", "allreduce_async",
                 "allreduce_async_", "grouped_allreduce", "grouped_allreduce_",
                 "grouped_allreduce_async", "grouped_allreduce_async_", "allgather",
                 "allgather_async", "broadcast", "broadcast_", "broadcast_async",
                 "broadcast_async_", "alltoall", "alltoall_async", "reducescatter",
                 "reducescatter_async", "barrier", "join", "poll", "synchronize",
                 "DistributedOptimizer", "SyncBatchNorm", "Compression", "broadcast_parameters",
                 "broadcast_optimizer_state", "broadcast_object", "allgather_object",
                 "HvdliteError", "HorovodInternalError"):
        assert hasattr(hvd, name), name
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)
    assert hvd.nccl_built() is False and hvd.mpi_built() is True


def test_collective_before_init_raises():
    code = ("import torch, hvdlite.torch as hvd\n"
            "try:\n    hvd.allreduce(torch.ones(2))\n"
            "except hvd.HvdliteNotInitializedError as e:\n    print('OK', e)\n")
    proc = subprocess.run(["timeout", "60", sys.executable, "-c", code], capture_output=True,
                          text=True, env=mpi_env())
    assert proc.returncode == 0 and "OK" in proc.stdout, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------
# MPI jobs

@pytest.mark.parametrize("np_", [1, 2, 3])
def test_collectives(np_):
    out = run_mpi(np_, "workers/torch_ops.py", timeout=180).stdout
    assert f"torch_ops OK at {np_} ranks" in out, out


@pytest.mark.parametrize("np_", [2, 3])
def test_distributed_optimizer_matches_single_process(np_):
    pytest.importorskip("sklearn")
    out = run_mpi(np_, "workers/torch_train.py", timeout=240).stdout
    assert f"torch_train OK at {np_} ranks" in out, out
    lines = [line for line in out.splitlines() if line.startswith("equivalence")]
    assert len(lines) == 11, out
    print("\n".join(lines))


def test_unchanged_horovod_script():
    """Horovod's pytorch_mnist.py shape, only the import changed (fp16 + predivide on)."""
    pytest.importorskip("sklearn")
    out = run_mpi(2, "workers/torch_horovod_script.py", "--fp16-allreduce",
                  "--gradient-predivide-factor", "2", timeout=180).stdout
    m = re.search(r"HOROVOD SCRIPT OK ([\d.]+)", out)
    assert m and float(m.group(1)) > 0.6, out


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_tensors_staged_through_host():
    out = run_mpi(2, "workers/torch_ops.py", timeout=180).stdout
    assert "CUDA tensors staged through host" in out and "(skipped)" not in out, out


def test_example_pytorch_digits():
    pytest.importorskip("sklearn")
    out = _launcher(2, sys.executable, "examples/pytorch_digits.py", timeout=120)
    m = re.search(r"final test accuracy ([\d.]+)% in ([\d.]+) s", out)
    assert m, out
    assert float(m.group(1)) >= 95.0, out
    assert float(m.group(2)) < 50.0, out
    # progress comes from rank 0 only
    assert not re.search(r"^\[1\]:", out, re.M), out
    assert len(re.findall(r"^\[0\]: epoch", out, re.M)) == 20, out


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed unavailable")
def test_torch_bench_smoke():
    pytest.importorskip("sklearn")
    out = _launcher(2, sys.executable, "examples/torch_bench.py", "--quick", "--json",
                    timeout=180)
    results = [json.loads(line.split(":", 1)[1]) for line in out.splitlines()
               if line.startswith("[0]:") and "{" in line]
    assert [r["model"] for r in results] == ["cnn", "mlp"], out
    for r in results:
        assert r["ranks"] == 2 and r["hvdlite_ms"] > 0 and r["ddp_ms"] > 0
        assert r["ratio_ddp_over_hvdlite"] > 0
