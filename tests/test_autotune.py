"""Autotune at 2 ranks: it tunes while a loop runs (every result checked exactly, so ranks
applying different values in some round would fail or hang), records every trial and the
final choice in HVDLITE_AUTOTUNE_LOG, converges, and then holds still. On two hosts x two
ranks (tests/multihost/hosts.py) it also tries hierarchical all-reduce on and off, first, and
every rank switches in the same round (the timeline shows both algorithms). At 3 ranks on one
host it tries the shared-memory paths (the area or the ring; how much rides in the negotiation
round) first, and leaves one the user turned off (0) off."""
import csv
import os
import sys

import pytest

import mpi_launch
from mpi_launch import run_mpi
from test_timeline import load_checked

HERE = os.path.dirname(os.path.abspath(__file__))

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
    # One host: hierarchical all-reduce is not possible, so it stays off and is never tried.
    assert {r["hierarchical_allreduce"] for r in rows} == {"0"}
    assert not any(r["setting"] == "hierarchical_allreduce" for r in rows)


@pytest.mark.parametrize("board", ["4096", "0"])
def test_autotune_tries_the_shared_memory_paths_at_three_ranks(tmp_path, board):
    log = tmp_path / "autotune.csv"
    # The loop's results are checked exactly whatever path each round took; 30 s leave time
    # for the first settings searched (the algorithms) on an oversubscribed machine.
    run_mpi(3, "workers/autotune_loop.py", 30,
            env={"HVDLITE_AUTOTUNE": "1", "HVDLITE_AUTOTUNE_LOG": log,
                 "HVDLITE_BOARD_ALLREDUCE_MAX_BYTES": board}, timeout=240)
    rows = list(csv.DictReader(open(log)))
    first = [r for r in rows if r["pass"] == "1" and r["row"] == "trial"]
    tried = lambda setting: {r[setting] for r in first if r["setting"] == setting}
    assert tried("shm_allreduce_min_bytes") == {"1", "0"}, rows
    if board == "0":
        assert not tried("board_allreduce_max_bytes") and {r["board_allreduce_max_bytes"] for r in rows} == {"0"}
    else:
        assert tried("board_allreduce_max_bytes") == {"4096", "0", "16384"}, rows
    # The algorithms come first: nothing else was tried before them.
    settings = [r["setting"] for r in first]
    assert settings[0] == "shm_allreduce_min_bytes", settings


@pytest.fixture(scope="module")
def cluster():
    hosts = pytest.importorskip("multihost.hosts", reason="needs tests/multihost/hosts.py")
    reason = hosts.namespaces_unavailable_reason()
    if reason:
        pytest.skip(reason)
    with hosts.two_hosts() as c:
        yield c


def test_two_hosts_tune_hierarchical_on_and_off_first(cluster, tmp_path):
    log, trace = tmp_path / "autotune.csv", tmp_path / "timeline.json"
    settings = {"HVDLITE_AUTOTUNE": "1", "HVDLITE_AUTOTUNE_LOG": str(log),
                "HVDLITE_TIMELINE": str(trace)}
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **settings)
    forward = [a for name in settings for a in ("-x", name)]
    argv = [mpi_launch.mpirun_path(), "-np", "4", "-H", ",".join(f"{n}:2" for n in cluster.names),
            "--bind-to", "none", *forward, sys.executable,
            os.path.join(HERE, "workers", "autotune_hierarchical.py"), "60"]
    proc = cluster.run(cluster.names[0], argv, timeout=180, env=env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0 and out.count(" done") == 4, out[-10000:]
    # The algorithm is searched first: its two trials come before any other setting's.
    rows = list(csv.DictReader(open(log)))
    assert [(r["setting"], r["hierarchical_allreduce"]) for r in rows[:2]] == \
        [("hierarchical_allreduce", "1"), ("hierarchical_allreduce", "0")], rows
    # Rank 0's timeline shows the batches of both trials: the three hierarchical stages, then
    # the flat ring's two phases.
    events, _ = load_checked(trace)  # schema and nesting per track
    phases = {e["name"] for e in events if e.get("ph") == "X"}
    assert {"HIERARCHICAL_INTRA_REDUCE_SCATTER", "HIERARCHICAL_CROSS_ALLREDUCE",
            "HIERARCHICAL_INTRA_ALLGATHER", "RING_REDUCE_SCATTER", "RING_ALLGATHER"} <= phases, phases
    first = lambda name: min(e["ts"] for e in events if e.get("name") == name)
    assert first("HIERARCHICAL_CROSS_ALLREDUCE") < first("RING_REDUCE_SCATTER")
