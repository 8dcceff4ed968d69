"""The timeline (HVDLITE_TIMELINE, hvd.start_timeline/stop_timeline): a Chrome trace whose
schema, per-track nesting and content for a known loop (tests/workers/timeline_loop.py) are
checked, that stays valid JSON when the job is killed."""
import json
import subprocess
import sys

from mpi_launch import run_mpi

TENSORS = ["params", "grad.small.0", "grad.small.1", "grad.big", "grad.compressed", "grad.late",
           "grad.other", "grad.shard"]
STEPS = 3


def load_checked(path):
    """Loads the trace and checks every event's schema and that spans nest on each track."""
    with open(path) as f:
        events = json.load(f)
    assert isinstance(events, list) and events
    tracks, spans = {}, {}
    for e in events:
        assert e["ph"] in ("X", "i", "C", "M"), e
        assert isinstance(e["name"], str) and isinstance(e["pid"], int), e
        if e["ph"] == "M":
            if e["name"] == "thread_name":
                tracks[(e["pid"], e["tid"])] = e["args"]["name"]
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0, e
        if e["ph"] == "X":
            assert e["dur"] >= 0, e
            spans.setdefault((e["pid"], e["tid"]), []).append(e)
        if e["ph"] == "C":
            assert all(isinstance(v, (int, float)) for v in e["args"].values()), e
    for key, track in spans.items():
        assert key in tracks, f"track {key} has events but no name"
        # Sorted by start (longer first at equal starts), each span lies within the innermost
        # open span or starts after it ended: a proper nesting.
        # Times are in microseconds with nanosecond digits: compare whole nanoseconds.
        ns = lambda us: round(us * 1000)
        stack = []
        for e in sorted(track, key=lambda e: (ns(e["ts"]), -ns(e["dur"]))):
            start, end = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
            while stack and start >= stack[-1][1]:
                stack.pop()
            if stack:
                assert end <= stack[-1][1], (
                    f"on track {tracks[key]!r}, {e['name']} overlaps {stack[-1][2]['name']}: "
                    f"{e} {stack[-1][2]}")
            stack.append((start, end, e))
    by_track = {}
    for e in events:
        if e["ph"] in ("X", "i") and (e["pid"], e["tid"]) in tracks:
            by_track.setdefault(tracks[(e["pid"], e["tid"])], []).append(e)
    return events, by_track


def names(track_events):
    out = {}
    for e in track_events:
        out[e["name"]] = out.get(e["name"], 0) + 1
    return out


def check_known_loop(by_track):
    for t in TENSORS:
        assert t in by_track, f"no track for {t}; tracks: {sorted(by_track)}"
    ring = ["QUEUE", "NEGOTIATE", "WAIT_FOR_DATA", "COMPLETE", "ALLREDUCE"]
    for t, phases in [("grad.small.0", ["MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER"]),
                      ("grad.small.1", ["MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER"]),
                      ("grad.late", ["MEMCPY_IN_FUSION_BUFFER", "MEMCPY_OUT_FUSION_BUFFER"]),
                      ("grad.big", ["ZERO_COPY_SPAN"]),
                      ("grad.compressed", ["COMPRESS", "DECOMPRESS"])]:
        seen = names(by_track[t])
        for phase in ring + phases:
            assert seen.get(phase) == STEPS, f"{t}: {phase} seen {seen.get(phase)} times: {seen}"
        # Each step's batch ran the ring (two halves), the exchange (small batches) or, at 2
        # ranks on one host, the shared-memory all-reduce.
        halves = seen.get("RING_REDUCE_SCATTER", 0)
        assert halves == seen.get("RING_ALLGATHER", 0), f"{t}: {seen}"
        one_step = seen.get("EXCHANGE_ALLREDUCE", 0) + seen.get("SHM_ALLREDUCE", 0)
        assert halves + one_step == STEPS, f"{t}: {seen}"
    # The two small gradients were fused: their copies into the buffer are the same span.
    copy = lambda t: [(e["ts"], e["dur"]) for e in by_track[t] if e["name"] == "MEMCPY_IN_FUSION_BUFFER"]
    assert copy("grad.small.0") == copy("grad.small.1")
    seen = names(by_track["grad.shard"])
    # Through the ring (a work buffer), or through the ranks' shared memory, where the input
    # and output stand in for the work buffer (Note [reduce-scatter in place of a work buffer]).
    path = (["MEMCPY_IN_OUTPUT", "SHM_REDUCE_SCATTER"] if "SHM_REDUCE_SCATTER" in seen else
            ["MEMCPY_IN_WORK_BUFFER", "RING_REDUCE_SCATTER", "MEMCPY_OUT_WORK_BUFFER"])
    for phase in ["QUEUE", "NEGOTIATE", *path, "COMPLETE", "REDUCESCATTER"]:
        assert seen.get(phase) == STEPS, f"grad.shard: {phase} seen {seen.get(phase)} times: {seen}"
    assert "EXECUTE" not in seen, seen
    seen = names(by_track["params"])
    assert seen.get("BROADCAST") == 1 and seen.get("EXECUTE") == 1 and seen.get("NEGOTIATE") == 1
    # Rank 1 submitted grad.late late at step 0, through the coordinator, and at step 2, on
    # the cached path; rank 0 submitted grad.other after it, late for rank 1. NEGOTIATE names
    # the late rank on both paths.
    late, other = ([e for e in by_track[t] if e["name"] == "NEGOTIATE"] for t in ("grad.late", "grad.other"))
    assert [e["args"]["path"] for e in late] == ["coordinator", "cache", "cache"], late
    assert late[0]["args"]["late_ranks"] == [1], late[0]
    assert late[2]["args"]["late_ranks"] == [1], late[2]
    assert other[2]["args"]["path"] == "cache" and other[2]["args"]["late_ranks"] == [0], other[2]


def test_timeline_from_environment_shows_the_loop(tmp_path):
    path = tmp_path / "timeline.json"
    out = run_mpi(2, "workers/timeline_loop.py", "env", env={"HVDLITE_TIMELINE": path},
                  timeout=180).stdout
    assert out.count("done") == 2
    events, by_track = load_checked(path)
    check_known_loop(by_track)
    assert {e["pid"] for e in events} == {0}, "only rank 0 writes by default"
    assert any(e["ph"] == "C" and e["name"] == "fused_bytes" for e in events)
    assert not any(e["name"] == "CYCLE_START" for e in events)


def test_start_timeline_all_ranks_with_cycle_markers(tmp_path):
    path = tmp_path / "api.json"
    out = run_mpi(2, "workers/timeline_loop.py", "api", path,
                  env={"HOROVOD_TIMELINE_ALL_RANKS": "ignored", "HVDLITE_TIMELINE_ALL_RANKS": "1"},
                  timeout=180).stdout
    assert out.count("done") == 2
    assert not path.exists()
    for rank in (0, 1):
        events, by_track = load_checked(tmp_path / f"api.{rank}.json")
        assert {e["pid"] for e in events} == {rank}
        assert "grad.big" in by_track and "cycles" in by_track
        # Every rank learns the late ranks of the cached path from the round itself.
        late = [e for e in by_track["grad.late"] if e["name"] == "NEGOTIATE"]
        assert late[2]["args"]["path"] == "cache" and late[2]["args"]["late_ranks"] == [1], late
        assert names(by_track["cycles"]).get("CYCLE_START", 0) >= STEPS
    # The barrier after stop_timeline() is not in the file.
    assert not any(t.startswith("barrier") for t in by_track)


def test_timeline_is_valid_json_after_kill(tmp_path):
    path = tmp_path / "killed.json"
    proc = run_mpi(2, "workers/timeline_loop.py", "kill", env={"HOROVOD_TIMELINE": path},
                   timeout=180, check=False)
    assert proc.returncode != 0 and "done" not in proc.stdout
    _, by_track = load_checked(path)
    check_known_loop(by_track)


def test_every_adapter_has_start_and_stop_timeline():
    code = ("import hvdlite, hvdlite.torch, hvdlite.tensorflow, hvdlite.tensorflow.keras\n"
            "for m in (hvdlite, hvdlite.torch, hvdlite.tensorflow, hvdlite.tensorflow.keras):\n"
            "    assert m.start_timeline is hvdlite.start_timeline, m\n"
            "    assert m.stop_timeline is hvdlite.stop_timeline, m\n"
            "print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip() == "ok", out.stderr[-3000:]
