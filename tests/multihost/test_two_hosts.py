"""Real jobs across two hosts on this machine (tests/multihost/hosts.py): distinct host
names, TCP over a veth link between network namespaces, ranks started over a real ssh.

The whole module skips, with the reason, where namespaces cannot be made (not root, no
`unshare`); as root it installs Debian's openssh-server if needed.
"""
import json
import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
REPO = os.path.dirname(TESTS)
sys.path.insert(0, HERE)
from hosts import namespaces_unavailable_reason, two_hosts  # noqa: E402
import hosts as hosts_module  # noqa: E402

pytestmark = pytest.mark.timeout(600)
WORKER = os.path.join(TESTS, "workers", "multihost_topology.py")
JOB_TIMEOUT = 240

_reason = namespaces_unavailable_reason()
if _reason:
    pytest.skip(_reason, allow_module_level=True)


@pytest.fixture(scope="module")
def cluster():
    with two_hosts() as c:
        yield c


def job_env(**extra):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update({k: str(v) for k, v in extra.items()})
    return env


def hvdlite_run(cluster, *args, env=None, timeout=JOB_TIMEOUT):
    """hvdlite-run started on the first host, as from a login node that also computes."""
    return cluster.run(cluster.names[0], [sys.executable, "-m", "hvdlite.runner", *map(str, args)],
                       env=env or job_env(), cwd=REPO, timeout=timeout)


def show(proc):
    return f"rc={proc.returncode}\n--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"


def topology(proc):
    found = [json.loads(line.split("TOPOLOGY ", 1)[1]) for line in proc.stdout.splitlines()
             if "TOPOLOGY " in line]
    return sorted(found, key=lambda t: t["rank"])


def check_two_by_two(cluster, proc):
    assert proc.returncode == 0, show(proc)
    ranks = topology(proc)
    a, b = cluster.names
    assert [t["rank"] for t in ranks] == [0, 1, 2, 3], show(proc)
    assert [t["host"] for t in ranks] == [a, a, b, b], show(proc)
    for t in ranks:
        assert (t["size"], t["local_size"], t["cross_size"]) == (4, 2, 2), t
        assert t["local_rank"] == t["rank"] % 2 and t["cross_rank"] == t["rank"] // 2, t
        assert t["allreduce_ok"] and t["hosts"] == [a, a, b, b], t
        assert t["env"] == {"HVDLITE_TEST_SETTING": "reaches-every-host"}, (t, show(proc))


def test_host_list_over_ssh(cluster):
    a, b = cluster.names
    proc = hvdlite_run(cluster, "-np", 4, "-H", f"{a}:2,{b}:2", "-v", sys.executable, WORKER,
                       env=job_env(HVDLITE_TEST_SETTING="reaches-every-host"))
    check_two_by_two(cluster, proc)


def test_hostfile_port_identity_and_interface(cluster, tmp_path):
    """Open MPI's hostfile format, sshd on another port with an explicit key, and MPI's TCP
    traffic restricted to the link's interface."""
    a, b = cluster.names
    hostfile = tmp_path / "hosts"
    hostfile.write_text(f"# two hosts\n{a} slots=2\n{b}:2\n")
    proc = hvdlite_run(cluster, "-np", 4, "--hostfile", hostfile, "-p", 2222,
                       "-i", cluster.identity_file, "--network-interface", "veth0", "-v",
                       sys.executable, WORKER,
                       env=job_env(HVDLITE_TEST_SETTING="reaches-every-host"))
    check_two_by_two(cluster, proc)
    # In the -v command (Hydra puts the ssh options into a -launcher-exec wrapper).
    assert "veth0" in proc.stderr and ("2222" in proc.stderr or "-launcher-exec" in proc.stderr), show(proc)


def test_one_rank_per_host(cluster):
    a, b = cluster.names
    proc = hvdlite_run(cluster, "-np", 2, "-H", f"{a}:1,{b}:1", sys.executable, WORKER)
    assert proc.returncode == 0, show(proc)
    ranks = topology(proc)
    assert [(t["host"], t["local_rank"], t["local_size"], t["cross_rank"], t["cross_size"])
            for t in ranks] == [(a, 0, 1, 0, 2), (b, 0, 1, 1, 2)], show(proc)


# Seen failing once in a loaded full-suite run and passing alone; one rerun until understood.
@pytest.mark.flaky(reruns=1)
def test_remote_failure_ends_the_job_with_its_own_error(cluster):
    a, b = cluster.names
    proc = hvdlite_run(cluster, "-np", 4, "-H", f"{a}:2,{b}:2", sys.executable, WORKER,
                       env=job_env(HVDLITE_TEST_FAIL_RANK=3))
    assert proc.returncode != 0, show(proc)
    summary = proc.stderr[proc.stderr.index("hvdlite-run: rank "):]
    assert summary.startswith(f"hvdlite-run: rank 3 raised ValueError: DISTINCTIVE-REMOTE-FAILURE "
                              f"on {b} rank 3"), show(proc)
    # Its own output (stdout and stderr reach us by separate pipes, in either order).
    assert f"\n[3]: ValueError: DISTINCTIVE-REMOTE-FAILURE on {b} rank 3\n" in summary, show(proc)


def test_more_ranks_than_slots_needs_oversubscribe(cluster):
    a, b = cluster.names
    proc = hvdlite_run(cluster, "-np", 3, "-H", f"{a}:1,{b}:1", sys.executable, WORKER)
    assert proc.returncode == 2, show(proc)
    assert "-np 3 is more than the 2 slots" in proc.stderr, show(proc)
    proc = hvdlite_run(cluster, "-np", 3, "-H", f"{a}:1,{b}:1", "--oversubscribe",
                       sys.executable, WORKER)
    assert proc.returncode == 0 and len(topology(proc)) == 3, show(proc)


def test_ssh_failure_is_one_line(cluster):
    a, b = cluster.names
    proc = hvdlite_run(cluster, "-np", 2, "-H", f"{a}:1,{b}:1", "-p", 2299, sys.executable, WORKER)
    assert proc.returncode == 2, show(proc)
    errors = [l for l in proc.stderr.splitlines() if l.startswith("hvdlite-run: error:")]
    assert len(errors) == 1 and f"cannot reach host '{b}' over ssh" in errors[0], show(proc)
    assert "Connection refused" in errors[0], show(proc)


def _accuracy(pattern, text):
    found = re.findall(pattern, text)
    assert len(found) == 1, text[-5000:]
    return found[0]


@pytest.mark.parametrize("example, pattern", [
    ("pytorch_digits.py", r"final test accuracy ([0-9.]+%)"),
    ("keras_digits.py", r"test accuracy: ([0-9.]+ \(\d+/\d+\))"),
])
def test_examples_train_as_on_one_host(cluster, example, pattern):
    # Submodules: tests/torch and tests/tensorflow would import as namespace packages.
    pytest.importorskip("torch.nn" if "torch" in example else "tensorflow.python")
    a, b = cluster.names
    script = os.path.join(REPO, "examples", example)
    one = hvdlite_run(cluster, "-np", 2, sys.executable, script, timeout=400)
    two = hvdlite_run(cluster, "-np", 2, "-H", f"{a}:1,{b}:1", sys.executable, script, timeout=400)
    assert one.returncode == 0, show(one)
    assert two.returncode == 0, show(two)
    # Same ranks, same data shards, same reduction order: the same model, to the digit.
    assert _accuracy(pattern, two.stdout) == _accuracy(pattern, one.stdout), (one.stdout, two.stdout)


ECHO = """
import socket
server = socket.create_server(("", 5599))
print("listening", flush=True)
conn, _ = server.accept()
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while (data := conn.recv(64)):
    conn.sendall(data)
"""


def test_link_delay_without_netem_is_a_delay_line():
    """Where the kernel has no netem, two_hosts(delay_ms=) joins the hosts by a user-space
    delay line (delay_line.py): TCP round trips over it take at least twice the delay."""
    if hosts_module.netem_available():
        pytest.skip("this kernel has netem: two_hosts(delay_ms=) uses it instead")
    delay_ms = 5
    with two_hosts(delay_ms=delay_ms) as c:
        a, b = c.names
        assert c.delay_line_ms == delay_ms and c.link_devices(a) == ["dl0"]
        server = subprocess.Popen(c.command(b, [sys.executable, "-c", ECHO]),
                                  stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout.readline().strip() == "listening"
            client = (f"import socket, time\ns = socket.create_connection(('{b}', 5599))\n"
                      "s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)\nrtts = []\n"
                      "for i in range(10):\n    t = time.perf_counter(); s.sendall(b'x')\n"
                      "    assert s.recv(64) == b'x'\n"
                      "    rtts.append((time.perf_counter() - t) * 1000)\nprint(min(rtts))")
            proc = c.run(a, [sys.executable, "-c", client], timeout=60)
            assert proc.returncode == 0, show(proc)
            rtt = float(proc.stdout)
            assert rtt >= 2 * delay_ms, rtt
            print(f"round trip over a {delay_ms} ms delay line: {rtt:.1f} ms at best")
        finally:
            server.kill()
            server.wait()
