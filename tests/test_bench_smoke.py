"""Smoke test of examples/allreduce_bench.py: --quick --json at 2 ranks through hvdlite-run."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("mpi4py", reason="the benchmark's MPI baseline needs mpi4py (pip install mpi4py)")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BENCH = os.path.join(REPO, "examples", "allreduce_bench.py")
HARD_TIMEOUT = 240

pytestmark = pytest.mark.timeout(HARD_TIMEOUT + 30)


def _core_available():
    try:
        import hvdlite
        from hvdlite import _core  # noqa: F401
        return hasattr(hvdlite, "init")
    except Exception:
        return False


if not _core_available():
    pytest.skip("hvdlite core is not built", allow_module_level=True)


def run_bench(*args, env=None):
    cmd = ["timeout", "--kill-after=10", str(HARD_TIMEOUT), sys.executable, "-m", "hvdlite.runner",
           "-np", "2", sys.executable, BENCH, *args]
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HVDLITE_")}
    full_env["OMP_NUM_THREADS"] = "1"
    full_env.update(env or {})
    proc = subprocess.run(cmd, env=full_env, capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, (f"rc={proc.returncode}\n--- stdout ---\n{proc.stdout}"
                                  f"\n--- stderr ---\n{proc.stderr}")
    return proc


def _positive(x):
    return isinstance(x, (int, float)) and x > 0


def test_quick_json(tmp_path):
    out = tmp_path / "bench.json"
    proc = run_bench("--quick", "--json", str(out))
    res = json.loads(out.read_text())
    # gloo must work wherever torch is installed; mpi4py is (the module is skipped otherwise).
    have_torch = importlib.util.find_spec("torch") is not None
    assert res["config"]["baselines"] == {"mpi": True, "gloo": have_torch}
    assert res["config"]["ranks"] == 2
    assert len(res["sizes"]) == 3
    for row in res["sizes"]:
        assert _positive(row["bytes"]) and row["elements"] * 4 == row["bytes"]
        libs = ["hvdlite", "mpi"] + (["gloo"] if have_torch else [])
        for lib in libs:
            for key in ("median_s", "p90_s", "iters", "busbw_GBps"):
                assert _positive(row[lib][key]), (lib, key, row)
        assert _positive(row["speedup_vs_mpi"])
        if have_torch:
            assert _positive(row["speedup_vs_gloo"])
    for lib in ["hvdlite", "mpi"] + (["gloo"] if have_torch else []):
        lat = res["latency"][lib]
        assert _positive(lat["median_us"]) and _positive(lat["p90_us"]) and lat["iters"] > 0
        assert lat["p90_us"] >= lat["median_us"]
    rn = res["resnet50"]
    assert rn["tensors"] == 161 and rn["params"] == 25_557_032 and rn["bytes"] == 4 * 25_557_032
    for key in ("hvdlite_161_async_s", "hvdlite_single_buffer_s", "mpi_single_buffer_s",
                "ratio_hvdlite_161_over_mpi_single"):
        assert _positive(rn[key]), (key, rn)
    # The table is printed by rank 0 only.
    assert "[0]: 1. float32 all-reduce" in proc.stdout
    assert "[1]: 1. float32" not in proc.stdout
    assert "ratio hvdlite(161 tensors) / MPI(one buffer)" in proc.stdout


def test_without_mpi4py_and_torch(tmp_path):
    """With mpi4py and torch unimportable the baselines are skipped with a note, not a crash."""
    shadow = tmp_path / "shadow"
    for pkg in ("mpi4py", "torch"):
        (shadow / pkg).mkdir(parents=True)
        (shadow / pkg / "__init__.py").write_text(f"raise ImportError('{pkg} hidden by the test')\n")
    out = tmp_path / "bench.json"
    pythonpath = os.pathsep.join(filter(None, [str(shadow), os.environ.get("PYTHONPATH")]))
    proc = run_bench("--quick", "--sizes", "4K", "--latency-iters", "20", "--resnet-iters", "1",
                     "--json", str(out), env={"PYTHONPATH": pythonpath})
    res = json.loads(out.read_text())
    assert "note: mpi4py is not importable" in proc.stdout
    assert "note: torch is not importable" in proc.stdout
    row = res["sizes"][0]
    assert _positive(row["hvdlite"]["median_s"]) and row["mpi"] is None and row["gloo"] is None
    assert res["latency"]["mpi"] is None and _positive(res["latency"]["hvdlite"]["median_us"])
    assert res["resnet50"]["mpi_single_buffer_s"] is None
    assert _positive(res["resnet50"]["hvdlite_161_async_s"])


def test_timeline_overhead_part(tmp_path):
    out, trace = tmp_path / "bench.json", tmp_path / "trace.json"
    run_bench("--quick", "--parts", "timeline", "--no-gloo", "--json", str(out),
              "--timeline-file", str(trace))
    tl = json.loads(out.read_text())["timeline"]
    for case in ("latency_1_float", "resnet50_161_tensors"):
        assert _positive(tl[case]["off_s"]) and _positive(tl[case]["on_s"]), tl
        assert _positive(tl[case]["ratio_on_over_off"])
    events = json.loads(trace.read_text())
    # The fused ResNet-50 batches' data phase: the ring's, or at 2 ranks on one host the
    # shared-memory all-reduce's.
    assert any(e.get("name") in ("RING_REDUCE_SCATTER", "SHM_ALLREDUCE") for e in events)
    assert tl["timeline_bytes"] == trace.stat().st_size
