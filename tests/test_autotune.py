"""Autotune at 2 ranks: it tunes while a loop runs (every result checked exactly, so ranks
applying different values in some round would fail or hang), records every trial and the
final choice in HVDLITE_AUTOTUNE_LOG, converges, and then holds still."""
import csv

from mpi_launch import run_mpi

CANDIDATES = {
    "fusion_threshold": {1 << 20, 4 << 20, 16 << 20, 64 << 20, 128 << 20, 64 << 10},
    "cycle_time_ms": {0.05, 0.25, 1.0},
    "ring_piece_bytes": {64 << 10, 256 << 10, 1 << 20, 4 << 20},
}


def test_autotune_converges_logs_every_trial_and_holds_still(tmp_path):
    log = tmp_path / "autotune.csv"
    # A deliberately bad start (HOROVOD_* aliases are accepted too).
    out = run_mpi(2, "workers/autotune_loop.py", 120,
                  env={"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_LOG": log,
                       "HVDLITE_FUSION_THRESHOLD": 64 << 10}, timeout=240).stdout
    assert out.count("converged True") == 2, out
    rows = list(csv.DictReader(open(log)))
    trials, final = rows[:-1], rows[-1]
    assert all(r["row"] in ("trial", "confirm") for r in trials) and final["row"] == "final"
    # The first pass tries every candidate of every setting, starting values included.
    first = [r for r in trials if r["pass"] == "1" and r["row"] == "trial"]
    for setting, values in CANDIDATES.items():
        tried = {float(r[setting]) for r in first if r["setting"] == setting}
        assert tried == {float(v) for v in values}, (setting, tried)
    assert all(float(r["score_bytes_per_s"]) > 0 and r["samples"] == "3" for r in trials)
    assert [int(r["trial"]) for r in trials] == list(range(1, len(trials) + 1))
    # The final choice is one that was measured; nothing was tried after it (the loop ran
    # 2 s past convergence).
    assert any(all(r[k] == final[k] for k in CANDIDATES) for r in trials), final
    for setting, values in CANDIDATES.items():
        assert float(final[setting]) in {float(v) for v in values}
