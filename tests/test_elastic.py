"""Elastic training: a lost rank does not end the job (Open MPI 5 with ULFM).

Each job trains the digits model of tests/elastic_digits.py at 3 ranks under
``hvdlite-run --min-np``; one rank fails mid-training, after the survivors have trained past
the last commit. The survivors must finish, and their final parameters must equal a replay in
one process that runs at 3 ranks before the committed step the survivors resumed from and at
2 after it. Tolerance: float64, |difference| <= 1e-12 (only the order of additions differs);
the test also checks that the replay without the membership change misses by far more, so the
comparison would catch a step applied twice or a lost commit.
"""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

import elastic_digits as problem
from hvdlite import mpi_library
from hvdlite.contract import membership
from hvdlite.runner import dialect, elastic, launch
from mpi_launch import run_once_more_if_mpi_never_started

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WORKER = os.path.join(HERE, "workers", "elastic_torch_train.py")
HARD_TIMEOUT = 300   # seconds per job (torch or TF import at 3 ranks on 2 shared cores)
TOLERANCE = 1e-12

pytestmark = pytest.mark.timeout(HARD_TIMEOUT + 60)
needs_ulfm = pytest.mark.skipif(not mpi_library.load()["fault_tolerant"],
                                reason="hvdlite built against an MPI without ULFM")


def run_launcher(*args, env=None, timeout=HARD_TIMEOUT):
    extra = env or {}
    env = {k: v for k, v in os.environ.items() if not k.startswith("HVDLITE_")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.pathsep.join([HERE, REPO]), **extra)
    cmd = ["timeout", "--kill-after=10", str(timeout), sys.executable, "-m",
           "hvdlite.runner", *map(str, args)]

    def launch():
        proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=REPO)
        return proc, proc.stdout + proc.stderr
    proc = run_once_more_if_mpi_never_started(launch)
    assert proc.returncode not in (124, 137), (
        f"hvdlite-run timed out\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    return proc


def max_difference(got, want):
    return max(float(np.max(np.abs(a - b))) for a, b in zip(got, want))


def check_against_reference(out):
    result = np.load(out)
    params = [result[f"arr_{i}"] for i in range(4)]
    resets = result["resets"]
    assert resets.shape == (1, 2) and resets[0, 1] == 2, resets
    resumed = int(resets[0, 0])
    # The victim failed at step 13; the last commit before it was step 10.
    assert resumed == 10, resumed
    want = problem.reference(lambda step: 3 if step < resumed else 2)
    assert max_difference(params, want) <= TOLERANCE
    unchanged = problem.reference(lambda step: 3)
    assert max_difference(params, unchanged) > 1e-6
    return float(result["recovery_seconds"])


@needs_ulfm
@pytest.mark.parametrize("mode, how", [("kill", "killed by signal 9 (SIGKILL)"),
                                       ("raise", "exited with code 1")])
def test_torch_survives_a_lost_rank(tmp_path, mode, how):
    out = str(tmp_path / "final.npz")
    proc = run_launcher("-np", 3, "--min-np", 2, "python", WORKER, mode, 1, 13, out)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"hvdlite-run: rank 1 lost ({how}); continuing with 2 ranks" in proc.stderr, proc.stderr
    assert "rank 0 finished as rank 0 of 2" in proc.stdout
    assert "rank 2 finished as rank 1 of 2" in proc.stdout
    seconds = check_against_reference(out)
    print(f"{mode}: death to first step at 2 ranks: {seconds:.3f} s")
    assert 0 < seconds < 30


@needs_ulfm
@pytest.mark.parametrize("mode", ["kill", "remove", "add"])
def test_torch_sharded_state_is_resharded(tmp_path, mode):
    """shard_optimizer_state=True: the shards are re-cut for the new size from the last
    commit's consolidated state (a killed rank's own shard is gone; an added rank has none)
    and training goes on as the replay of the unsharded optimizer says."""
    out = str(tmp_path / "final.npz")
    env = {"ELASTIC_SHARDED": "1"}
    if mode == "kill":
        proc = run_launcher("-np", 3, "--min-np", 2, "python", WORKER, "kill", 1, 13, out,
                            env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "rank 2 finished as rank 1 of 2" in proc.stdout, proc.stdout + proc.stderr
        seconds = check_against_reference(out)
    elif mode == "add":
        script = discovery_script(tmp_path, out, ["localhost:2"])
        proc = run_launcher("-np", 2, "--min-np", 2, "--max-np", 3, "--host-discovery-script",
                            script, "python", WORKER, "add", 0, 8, out, "localhost:3", env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "hvdlite-run: rank 2 joined; continuing with 3 ranks" in proc.stderr, proc.stderr
        seconds = check_host_change(out, 2, 3)
    else:
        script = discovery_script(tmp_path, out, ["localhost:2", "127.0.0.1:1"])
        proc = run_launcher("-np", 3, "--min-np", 2, "--host-discovery-script", script,
                            "python", WORKER, "remove", 0, 8, out, "localhost:2", env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "rank 2 left (its host was removed)" in proc.stderr, proc.stderr
        seconds = check_host_change(out, 3, 2)
    print(f"sharded {mode}: event to first step at the new size: {seconds:.3f} s")


@needs_ulfm
def test_core_rebuild_keeps_process_sets_and_point_to_point():
    proc = run_launcher("-np", 3, "--min-np", 2, "python",
                        os.path.join(HERE, "workers", "elastic_core.py"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "rank 0 recovered as 0 of 2" in proc.stdout
    assert "rank 2 recovered as 1 of 2" in proc.stdout


@needs_ulfm
@pytest.mark.parametrize("np_, lanes", [(2, 1), (3, 1), (3, 3)])
def test_peer_lost_in_a_shared_memory_allreduce_fails_it(np_, lanes):
    # With lanes (csrc/algorithms/shm_lanes.h), the other lanes' threads are told to give up
    # and joined when the engine's thread notices the lost peer.
    proc = run_launcher("-np", np_, "--min-np", 1, "python",
                        os.path.join(HERE, "workers", "elastic_shm_peer_lost.py"), timeout=120,
                        env={"HVDLITE_SHM_LANES": str(lanes)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"[0]: rank 0 ran its warm-up in {lanes} lane(s)" in proc.stdout, proc.stdout
    left = f"{np_ - 1} rank" + ("s" if np_ > 2 else "")
    assert (f"hvdlite-run: rank {np_ - 1} lost (killed by signal 9 (SIGKILL)); continuing with {left}"
            in proc.stderr), proc.stderr
    for r in range(np_ - 1):
        assert f"[{r}]: rank {r} noticed the lost peer after" in proc.stdout, proc.stdout
    print("".join(line + "\n" for line in proc.stdout.splitlines() if "noticed" in line))


@needs_ulfm
@pytest.mark.parametrize("np_, victim", [(3, 1), (4, 3)])
def test_every_survivor_of_a_killed_rank_raises_ranks_lost(np_, victim):
    """SIGKILL in a 64 MiB all-reduce loop: the ring's MPI_Waitall reports the lost peer only
    in its requests' statuses; every survivor still raises HvdliteRanksLostError."""
    proc = run_launcher("-np", np_, "--min-np", 2, "python",
                        os.path.join(HERE, "workers", "elastic_ranks_lost.py"), victim, timeout=200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("raised HvdliteRanksLostError") == np_ - 1, proc.stdout


@needs_ulfm
def test_core_regroup_adds_and_removes_ranks():
    proc = run_launcher("-np", 2, "--min-np", 1, "python",
                        os.path.join(HERE, "workers", "elastic_regroup.py"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "hvdlite-run: rank 2 joined; continuing with 3 ranks" in proc.stderr, proc.stderr
    assert "[1]: rank 1 left" in proc.stdout
    assert "[0]: rank 0 finished as 0 of 2" in proc.stdout
    assert "[2]: rank 2 finished as 1 of 2" in proc.stdout
    print("".join(line + "\n" for line in proc.stdout.splitlines() if " a rank in " in line))


@needs_ulfm
def test_fewer_than_min_np_ends_the_job(tmp_path):
    out = str(tmp_path / "final.npz")
    proc = run_launcher("-np", 2, "--min-np", 2, "python", WORKER, "kill", 1, 3, out)
    assert proc.returncode != 0
    assert ("hvdlite-run: error: rank 1 lost (killed by signal 9 (SIGKILL)); 1 rank left "
            "(lost: rank 1), fewer than --min-np 2; the job was ended") in proc.stderr, proc.stderr


def test_elastic_flags_are_checked():
    parser = launch.make_parser()
    ompi5, ompi4 = dialect.OpenMPI("5.0.11"), dialect.OpenMPI("4.1.6")
    args = parser.parse_args(["-np", "2", "--min-np", "3", "python", "x.py"])
    with pytest.raises(elastic.ElasticError, match="-np 2 is below --min-np 3"):
        elastic.check_settings(args, ompi5.fault_tolerance(), ompi5.describe(), True)
    args = parser.parse_args(["-np", "4", "--max-np", "3", "python", "x.py"])
    with pytest.raises(elastic.ElasticError, match="-np 4 is above --max-np 3"):
        elastic.check_settings(args, ompi5.fault_tolerance(), ompi5.describe(), True)
    args = parser.parse_args(["-np", "2", "--min-np", "2", "python", "x.py"])
    with pytest.raises(elastic.ElasticError, match="Open MPI 4.1.6 has none"):
        elastic.check_settings(args, ompi4.fault_tolerance(), ompi4.describe(), True)
    with pytest.raises(elastic.ElasticError, match="this build has no fault tolerance"):
        elastic.check_settings(args, ompi5.fault_tolerance(), ompi5.describe(), False)
    assert ompi5.fault_tolerance() == ["--with-ft", "ulfm"]
    # MPICH declares ULFM's functions, but they abort: the refusal says so.
    mpich = dialect.Hydra("5.0.2")
    with pytest.raises(elastic.ElasticError, match=r"MPICH \(Hydra\) 5.0.2 has none \(MPICH "
                       r"declares ULFM's .* its ch4 device aborts in them"):
        elastic.check_settings(args, mpich.fault_tolerance(), mpich.describe(), True,
                               mpich.no_fault_tolerance)
    intel = dialect.IntelHydra("2021.18")
    with pytest.raises(elastic.ElasticError, match=r"Intel MPI \(Hydra\) 2021.18 has none "
                       r"\(Intel MPI exports ULFM's .* crash \(SIGSEGV\)"):
        elastic.check_settings(args, intel.fault_tolerance(), intel.describe(), True,
                               intel.no_fault_tolerance)
    assert not elastic.is_elastic(parser.parse_args(["-np", "2", "python", "x.py"]))


def test_non_elastic_command_is_unchanged(tmp_path):
    parser = launch.make_parser()
    ompi5 = dialect.OpenMPI("5.0.11")
    plain = parser.parse_args(["-np", "2", "python", "x.py"])
    cmd, env = launch.build_command(plain, "mpirun", ompi5, None, str(tmp_path), base_env={})
    assert "--with-ft" not in cmd and "HVDLITE_ELASTIC" not in env
    el = parser.parse_args(["-np", "2", "--min-np", "1", "python", "x.py"])
    cmd, env = launch.build_command(el, "mpirun", ompi5, None, str(tmp_path), base_env={})
    assert cmd[cmd.index("--with-ft") + 1] == "ulfm"
    assert env["HVDLITE_ELASTIC"] == "1" and env["HVDLITE_ELASTIC_MIN_NP"] == "1"


def test_discovery_script_gives_the_hosts(tmp_path):
    script = tmp_path / "hosts.sh"
    script.write_text("#!/bin/sh\necho localhost:2\necho 127.0.0.1:1\n")
    script.chmod(0o755)
    assert elastic.discover_hosts(str(script)) == [("localhost", 2), ("127.0.0.1", 1)]
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/bin/sh\nexit 3\n")
    bad.chmod(0o755)
    with pytest.raises(elastic.ElasticError, match="exited with code 3"):
        elastic.discover_hosts(str(bad))


KERAS_WORKER = os.path.join(HERE, "workers", "elastic_keras_train.py")


@needs_ulfm
@pytest.mark.timeout(2 * HARD_TIMEOUT)
def test_keras_fit_survives_a_killed_rank(tmp_path):
    """model.fit with KerasState and the elastic callbacks (commit every 2 batches)."""
    out = str(tmp_path / "final.npz")
    env_tf = {"TF_CPP_MIN_LOG_LEVEL": "2"}
    proc = run_launcher("-np", 3, "--min-np", 2, "python", KERAS_WORKER, "kill", 1, 13, out,
                        env=env_tf, timeout=2 * HARD_TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("hvdlite-run: rank 1 lost (killed by signal 9 (SIGKILL)); continuing with 2 ranks"
            in proc.stderr), proc.stderr
    result = np.load(out)
    # Killed before step 13; the last commit (every 2 batches of 5 per epoch) was step 12.
    assert result["resets"].tolist() == [[12, 2]]
    assert float(result["diff"]) <= TOLERANCE
    assert float(result["diff_unchanged"]) > 1e-6
    print(f"keras kill: death to first step at 2 ranks: {float(result['recovery_seconds']):.3f} s")


def discovery_script(tmp_path, out, hosts):
    """A discovery script printing OUT.hosts, which the worker rewrites (see its docstring)."""
    with open(out + ".hosts", "w") as f:
        f.write("\n".join(hosts) + "\n")
    script = tmp_path / "hosts.sh"
    script.write_text(f"#!/bin/sh\ncat {out}.hosts\n")
    script.chmod(0o755)
    return str(script)


def check_host_change(out, before, after):
    """Final parameters equal the replay at `before` ranks up to the commit at step 10 (the
    first after the worker changed the hosts at step 8) and at `after` ranks from there."""
    result = np.load(out)
    params = [result[f"arr_{i}"] for i in range(4)]
    assert result["resets"].tolist() == [[10, after]], result["resets"]
    assert int(result["final_size"]) == after
    want = problem.reference(lambda step: before if step < 10 else after)
    assert max_difference(params, want) <= TOLERANCE
    assert max_difference(params, problem.reference(lambda step: before)) > 1e-6
    return float(result["recovery_seconds"])


@needs_ulfm
def test_torch_takes_in_a_rank_the_discovery_script_adds(tmp_path):
    out = str(tmp_path / "final.npz")
    script = discovery_script(tmp_path, out, ["localhost:2"])
    proc = run_launcher("-np", 2, "--min-np", 2, "--max-np", 3, "--host-discovery-script",
                        script, "python", WORKER, "add", 0, 8, out, "localhost:3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "hvdlite-run: hosts changed: localhost:3 (was localhost:2)" in proc.stderr
    assert "hvdlite-run: rank 2 joined; continuing with 3 ranks" in proc.stderr, proc.stderr
    for rank in range(3):
        assert f"[{rank}]: rank {rank} finished as rank {rank} of 3" in proc.stdout, proc.stdout
    seconds = check_host_change(out, 2, 3)
    print(f"add: commit that saw the new host to the first step at 3 ranks: {seconds:.3f} s")


@needs_ulfm
def test_torch_ranks_leave_when_their_host_is_removed(tmp_path):
    out = str(tmp_path / "final.npz")
    script = discovery_script(tmp_path, out, ["localhost:2", "127.0.0.1:1"])
    proc = run_launcher("-np", 3, "--min-np", 2, "--host-discovery-script", script,
                        "python", WORKER, "remove", 0, 8, out, "localhost:2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert ("hvdlite-run: rank 2 left (its host was removed); continuing with 2 ranks"
            in proc.stderr), proc.stderr
    assert "lost" not in proc.stderr, proc.stderr
    assert "[2]: rank 2 finished" not in proc.stdout
    seconds = check_host_change(out, 3, 2)
    print(f"remove: commit that saw the removal to the first step at 2 ranks: {seconds:.3f} s")


def test_plan_follows_the_discovered_hosts():
    members = membership.initial_members(3, [("a", 2), ("b", 1)])
    assert members == [(0, "a"), (1, "a"), (2, "b")]
    # b removed: its rank leaves; nothing to add.
    change = membership.plan(members, [("a", 2)], None, 3, 1)
    assert change.leaving == [2] and change.added == []
    # a shrinks to one slot: its higher rank leaves; c's two slots take two new ranks, but
    # --max-np 3 allows only one.
    change = membership.plan(members, [("a", 1), ("b", 1), ("c", 2)], 3, 3, 2)
    assert change.leaving == [1] and change.added == [(3, "c")]
    assert membership.apply(members, change) == [(0, "a"), (2, "b"), (3, "c")]
    # The same hosts: no change.
    assert membership.plan(members, [("a", 2), ("b", 1)], None, 3, 3) is None
    assert membership.without(members, [0]) == [(1, "a"), (2, "b")]


def test_host_watcher_rewrites_the_hosts_file(tmp_path):
    listing = tmp_path / "listing"
    listing.write_text("localhost:2\n")
    script = tmp_path / "hosts.sh"
    script.write_text(f"#!/bin/sh\ncat {listing}\n")
    script.chmod(0o755)
    said = []
    path = str(tmp_path / "hosts.json")
    watcher = elastic.HostWatcher(str(script), path, 2, [("localhost", 2)], write=said.append)
    assert membership.read_hosts(path) == (0, [("localhost", 2)], 2, [("localhost", 2)])
    assert not watcher.poll()
    listing.write_text("localhost:3\nother:1\n")
    assert watcher.poll()
    assert membership.read_hosts(path) == (1, [("localhost", 3), ("other", 1)], 2,
                                           [("localhost", 2)])
    assert said == ["hosts changed: localhost:3,other:1 (was localhost:2)"]
    listing.write_text("")   # nothing listed: a warning, and the last hosts are kept
    assert not watcher.poll()
    assert "listed no hosts; keeping the hosts found before" in said[-1]
    assert membership.read_hosts(path).version == 1


def test_router_reads_the_markers():
    from hvdlite.runner.output import OutputRouter
    router = OutputRouter(size=3)
    seen = []
    router.on_start = lambda r: seen.append(("start", r))
    router.on_leave = lambda r: seen.append(("leave", r))
    router.on_lost_report = lambda rs: seen.append(("lost", rs))
    router.on_abort = lambda r: seen.append(("abort", r))
    out = []
    for line in (b"[1,0]<stderr>: hvdlite-run-ranks-lost: ranks=1,4",
                 b"[1,1]<stderr>: hvdlite-run-rank-abort: rank=1",
                 b"[2,3]<stderr>: hvdlite-run-rank-start: rank=3",
                 b"[1,2]<stderr>: hvdlite-run-rank-leave: rank=2",
                 b"[2,3]<stdout>: hello"):
        for rank, text in router.split_line(line):
            out += router._route(rank, "stdout" if b"stdout" in line else "stderr", text)
    assert seen == [("lost", [1, 4]), ("abort", 1), ("start", 3), ("leave", 2)]
    assert out == [b"[3]: hello\n"]   # markers are never shown


@needs_ulfm
@pytest.mark.timeout(2 * HARD_TIMEOUT)
def test_keras_fit_takes_in_a_rank_the_discovery_script_adds(tmp_path):
    """model.fit with KerasState: 2 -> 3 ranks at the commit after the host change."""
    out = str(tmp_path / "final.npz")
    script = discovery_script(tmp_path, out, ["localhost:2"])
    proc = run_launcher("-np", 2, "--min-np", 2, "--max-np", 3, "--host-discovery-script",
                        script, "python", KERAS_WORKER, "add", 0, 8, out, "localhost:3",
                        env={"TF_CPP_MIN_LOG_LEVEL": "2"}, timeout=2 * HARD_TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "hvdlite-run: rank 2 joined; continuing with 3 ranks" in proc.stderr, proc.stderr
    assert "[2]: rank 2 finished as rank 2 of 3" in proc.stdout, proc.stdout
    result = np.load(out)
    # Hosts changed before step 8; the next commit (every 2 batches) was step 10.
    assert result["resets"].tolist() == [[10, 3]]
    assert float(result["diff"]) <= TOLERANCE
    assert float(result["diff_unchanged"]) > 1e-6
    print(f"keras add: host change to first step at 3 ranks: "
          f"{float(result['recovery_seconds']):.3f} s")


@needs_ulfm
@pytest.mark.timeout(2 * HARD_TIMEOUT)
@pytest.mark.parametrize("mode", ["raise", "remove", "add"])
def test_keras_fit_with_sharded_state_follows_the_membership(tmp_path, mode):
    """model.fit with KerasState and shard_optimizer_state=True: a rank raises (3 -> 2), a
    host is removed (3 -> 2) or added (2 -> 3); the shards are re-cut for the new size from
    the last commit, and the weights equal the replay of the unsharded optimizer."""
    out = str(tmp_path / "final.npz")
    env = {"TF_CPP_MIN_LOG_LEVEL": "2", "ELASTIC_SHARDED": "1"}
    if mode == "raise":
        args = ["-np", 3, "--min-np", 2, "python", KERAS_WORKER, "raise", 1, 13, out]
        # Raised before step 13; the last commit (every 2 batches) was step 12.
        after, resumed = 2, 12
    elif mode == "remove":
        script = discovery_script(tmp_path, out, ["localhost:2", "127.0.0.1:1"])
        args = ["-np", 3, "--min-np", 2, "--host-discovery-script", script, "python",
                KERAS_WORKER, "remove", 0, 8, out, "localhost:2"]
        after, resumed = 2, 10     # hosts changed before step 8; the next commit: step 10
    else:
        script = discovery_script(tmp_path, out, ["localhost:2"])
        args = ["-np", 2, "--min-np", 2, "--max-np", 3, "--host-discovery-script", script,
                "python", KERAS_WORKER, "add", 0, 8, out, "localhost:3"]
        after, resumed = 3, 10
    proc = run_launcher(*args, env=env, timeout=2 * HARD_TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    event = {"raise": "rank 1 lost (exited with code 1); continuing with 2 ranks",
             "remove": "rank 2 left (its host was removed); continuing with 2 ranks",
             "add": "rank 2 joined; continuing with 3 ranks"}[mode]
    assert f"hvdlite-run: {event}" in proc.stderr, proc.stderr
    result = np.load(out)
    assert result["resets"].tolist() == [[resumed, after]], result["resets"]
    assert int(result["final_size"]) == after
    assert float(result["diff"]) <= TOLERANCE
    assert float(result["diff_unchanged"]) > 1e-6
    print(f"keras sharded {mode}: event to first step at {after} ranks: "
          f"{float(result['recovery_seconds']):.3f} s")
