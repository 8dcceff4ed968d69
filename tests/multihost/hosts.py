"""Two or more "hosts" on this one machine, for real multi-host MPI jobs over ssh and TCP.

Each host is a set of Linux namespaces of its own, held open by a ``sleep`` process:

* network: its own ``lo`` and one end of a veth link (three or more hosts: to a bridge in the
  first host, a switch); the hosts reach each other only over those links (plain TCP, addresses 10.231.N.1, .2, ...), never through this machine's network.
  Nothing is added to the machine's own (root) network namespace.
* UTS: its own host name (``hvdl-a``, ``hvdl-b``), so MPI sees distinct nodes and keeps
  shared memory inside each host.
* no shared memory between hosts: each has its own ``/dev/shm`` and its own
  ``/proc/sys/kernel/random/boot_id`` (UCX decides from the boot id which peers share a
  machine).
* mount: a private ``/etc/hosts`` naming every host, and a private ``/root/.ssh`` with a fresh
  key pair, ``authorized_keys`` and a client config, so ``ssh hvdl-b`` works as on a cluster.

Every host runs Debian's ``sshd`` (installed with apt-get when missing) on port 22 and on
:data:`ALT_SSH_PORT` (for tests of ``-p``); both accept the key in ``/root/.ssh/id_ed25519``,
also found at :attr:`Cluster.identity_file` (for tests of ``-i``). The job is started from
inside the first host (as from a cluster's login node that is also a compute node), so mpirun
reaches the other host over a real ssh.

Usage (as root; the context manager cleans everything up, also after a failure)::

    sys.path.insert(0, "<repo>/tests/multihost")   # or, with <repo>/tests on sys.path
    from hosts import two_hosts, many_hosts, namespaces_unavailable_reason   # (pytest's): multihost.hosts

    reason = namespaces_unavailable_reason()      # None, or why this machine cannot do it
    with two_hosts(rate="10gbit") as cluster:     # rate: optional tbf shaping of the link
        print(cluster.names, cluster.addresses)   # ['hvdl-a', 'hvdl-b'], ['10.231.7.1', ...]
        proc = cluster.run("hvdl-a", ["hvdlite-run", "-np", "4", "-H", "hvdl-a:2,hvdl-b:2",
                                      sys.executable, "bench.py"], timeout=300)
        cluster.shape(rate="1gbit")               # reshape the link at any time; shape() clears
    with many_hosts(3) as cluster:                   # hvdl-a, hvdl-b, hvdl-c on one switch
        ...

``cluster.run(host, argv, timeout=..., env=...)`` runs a command inside that host's namespaces
(like ``subprocess.run`` with text output, stdout and stderr captured separately) under a hard
``timeout``; ``cluster.command(host, argv)`` returns the argv prefix to use with your own Popen.
The environment is passed through unchanged (so the venv's PATH works on the first host); on
the other hosts, mpirun's own forwarding applies, as on a real cluster.

Link delay (``delay_ms``) uses the kernel's netem qdisc where it has one. Where it does not,
two hosts get a delay line instead of the veth pair (``delay_line.py``: a TAP device ``dl0``
in each host and a process forwarding frames between them after the delay; fine for
latency-bound traffic, slow for bulk data); :meth:`Cluster.shape` cannot change that delay
later and raises :class:`ShapingUnavailable`. The CI machine this was written on has no netem: its kernel
(6.18.44-fc-v445) is built with ``# CONFIG_NET_SCH_NETEM is not set`` and without loadable
modules (``# CONFIG_MODULES is not set``; no ``/lib/modules``, no modprobe), and
``tc qdisc add dev veth0 root netem delay 1ms`` answers ``Error: Specified qdisc kind is
unknown.`` Of the qdiscs only tbf, htb, pfifo and ingress are built in.
"""

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Dict, Iterator, List, Optional, Sequence

try:
    from . import delay_line
except ImportError:   # imported as a top-level module (tests/multihost on sys.path)
    import delay_line

ALT_SSH_PORT = 2222
_SUBNET_BASE = "10.231"        # 10.231.N.0/24, N chosen per cluster; namespaced, never routed


class ShapingUnavailable(RuntimeError):
    """The kernel cannot shape the link as asked (e.g. no netem for a delay)."""


def _run(argv: Sequence[str], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=kw.pop("timeout", 60), **kw)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def namespaces_unavailable_reason() -> Optional[str]:
    """None when this process can build the hosts, else a one-line reason to skip."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "multi-host tests need root (network, UTS and mount namespaces)"
    for tool in ("unshare", "nsenter", "ip"):
        if not shutil.which(tool):
            return f"multi-host tests need `{tool}` (util-linux / iproute2)"
    probe = subprocess.run(["unshare", "--net", "--uts", "--mount", "--propagation", "private",
                            "ip", "link", "add", "hvdlprobe0", "type", "veth", "peer", "name",
                            "hvdlprobe1"], capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"cannot create namespaces with a veth link here: {probe.stderr.strip()}"
    return None


def ensure_sshd() -> str:
    """Path of Debian's sshd, installing openssh-server with apt-get if it is missing."""
    path = "/usr/sbin/sshd"
    if not os.path.exists(path):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "openssh-server"]
        if subprocess.run(install, capture_output=True, env=env, timeout=600).returncode != 0:
            _run(["apt-get", "update", "-q"], env=env, timeout=600)
            _run(install, env=env, timeout=600)
    if not shutil.which("ssh"):
        raise RuntimeError("ssh client missing after installing openssh-server")
    return path


def _pick_subnet() -> int:
    """A 10.231.N subnet number unlikely to be in use by a concurrent cluster (they are
    namespaced anyway; distinct numbers only keep logs unambiguous)."""
    return (os.getpid() % 200) + 20


def netem_available() -> bool:
    """Whether this kernel has the netem qdisc (tried on the loopback of a scratch namespace)."""
    probe = subprocess.run(["unshare", "--net", "tc", "qdisc", "add", "dev", "lo", "root",
                            "netem", "delay", "1ms"], capture_output=True, text=True, timeout=30)
    return probe.returncode == 0


class Cluster:
    """Handles of a running set of hosts; see the module docstring."""

    def __init__(self, names: List[str], addresses: List[str], pids: List[int], workdir: str):
        #: The fixed one-way delay of a delay line (delay_line.py), or None (veth links).
        self.delay_line_ms: Optional[float] = None
        self.names = names
        self.addresses = addresses
        self.pids = dict(zip(names, pids))
        self.workdir = workdir
        self.identity_file = os.path.join(workdir, "ssh", "hvdl_key")
        self.hostfile_lines = [f"{n} slots=2" for n in names]

    def command(self, host: str, argv: Sequence[str], cwd: Optional[str] = None) -> List[str]:
        """argv that runs ``argv`` inside ``host``'s network, UTS and mount namespaces, in
        ``cwd`` (default: this process's; entering a mount namespace would otherwise go to /)."""
        return ["nsenter", "-t", str(self.pids[host]), "--net", "--uts", "--mount",
                f"--wd={cwd or os.getcwd()}", "--", *map(str, argv)]

    def run(self, host: str, argv: Sequence[str], timeout: float = 300,
            env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
            check: bool = False) -> subprocess.CompletedProcess:
        """Run ``argv`` on ``host`` with a hard timeout (rc 124/137 when it ran out)."""
        cmd = ["timeout", "--kill-after=10", str(int(timeout)), *self.command(host, argv, cwd)]
        proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(map(str, argv))} on {host} exited "
                                 f"{proc.returncode}\n--- stdout ---\n{proc.stdout}\n"
                                 f"--- stderr ---\n{proc.stderr}")
        return proc

    def shape(self, rate: Optional[str] = None, delay_ms: Optional[float] = None,
              burst: str = "4mb") -> None:
        """Shape both directions of every link: tbf ``rate`` (e.g. '10gbit') and/or netem
        ``delay_ms``; with neither, remove the shaping."""
        if delay_ms and self.delay_line_ms is not None:
            raise ShapingUnavailable(
                f"this cluster's link is a delay line of {self.delay_line_ms} ms (no netem in "
                f"this kernel); its delay is set when the hosts are made")
        for host in self.names:
            for dev in self.link_devices(host):
                self.run(host, ["tc", "qdisc", "del", "dev", dev, "root"], timeout=30)
                parent = ["root"]
                if delay_ms:
                    proc = self.run(host, ["tc", "qdisc", "add", "dev", dev, "root", "handle",
                                           "1:", "netem", "delay", f"{delay_ms}ms"], timeout=30)
                    if proc.returncode != 0:
                        raise ShapingUnavailable(
                            f"cannot add a {delay_ms} ms link delay: the kernel has no netem "
                            f"qdisc (CONFIG_NET_SCH_NETEM): {proc.stderr.strip()}")
                    parent = ["parent", "1:1"]
                if rate:
                    proc = self.run(host, ["tc", "qdisc", "add", "dev", dev, *parent, "handle",
                                           "10:", "tbf", "rate", rate, "burst", burst,
                                           "latency", "100ms"], timeout=30)
                    if proc.returncode != 0:
                        raise ShapingUnavailable(f"cannot limit the link to {rate} with tbf: "
                                                 f"{proc.stderr.strip()}")

    def link_devices(self, host: str) -> List[str]:
        """The devices of host that lead to the other hosts."""
        if self.delay_line_ms is not None:
            return [delay_line.DEVICE]
        out = self.run(host, ["ip", "-o", "link", "show", "type", "veth"], timeout=30,
                       check=True).stdout
        return [line.split(":")[1].strip().split("@")[0] for line in out.splitlines() if line]


def _write(path: str, text: str, mode: int = 0o644) -> None:
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)


def _prepare_files(workdir: str, names: List[str], addresses: List[str]) -> None:
    ssh = os.path.join(workdir, "ssh")
    os.makedirs(ssh, mode=0o700)
    key = os.path.join(ssh, "hvdl_key")
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key, "-C", "hvdlite-multihost"])
    shutil.copy(key + ".pub", os.path.join(ssh, "authorized_keys"))
    os.chmod(os.path.join(ssh, "authorized_keys"), 0o600)
    # The key is also the default identity, as on a cluster with shared home directories.
    shutil.copy(key, os.path.join(ssh, "id_ed25519"))
    os.chmod(os.path.join(ssh, "id_ed25519"), 0o600)
    _write(os.path.join(ssh, "config"),
           "Host *\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
           "  LogLevel ERROR\n  BatchMode yes\n  ConnectTimeout 10\n")
    hosts = "127.0.0.1 localhost\n" + "".join(f"{a} {n}\n" for n, a in zip(names, addresses))
    _write(os.path.join(workdir, "hosts"), hosts)
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(workdir, "host_key")])
    for port in (22, ALT_SSH_PORT):
        _write(os.path.join(workdir, f"sshd_{port}.conf"),
               f"Port {port}\nHostKey {workdir}/host_key\nPermitRootLogin yes\n"
               "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n"
               f"StrictModes no\nAuthorizedKeysFile {ssh}/authorized_keys\n"
               f"PidFile {workdir}/sshd_{port}.pid\nAcceptEnv HVDLITE_*\nMaxStartups 100\n"
               "MaxSessions 100\n")


@contextlib.contextmanager
def two_hosts(rate: Optional[str] = None, delay_ms: Optional[float] = None) -> Iterator[Cluster]:
    """Hosts ``hvdl-a`` and ``hvdl-b`` joined by one veth pair, optionally shaped (see
    :meth:`Cluster.shape`); yields a :class:`Cluster` and removes everything afterwards."""
    with many_hosts(2, rate=rate, delay_ms=delay_ms) as cluster:
        yield cluster


@contextlib.contextmanager
def many_hosts(count: int, rate: Optional[str] = None,
          delay_ms: Optional[float] = None) -> Iterator[Cluster]:
    """``count`` hosts ``hvdl-a``, ``hvdl-b``, ... Two are joined by one veth pair; three or
    more by a switch: a bridge inside the first host with one veth link to each other host
    (the first host's own address is on the bridge). Links are optionally shaped (see
    :meth:`Cluster.shape`). Yields a :class:`Cluster`; removes everything afterwards."""
    if not 2 <= count <= 26:
        raise ValueError(f"many_hosts(count={count}): between 2 and 26 hosts")
    reason = namespaces_unavailable_reason()
    if reason:
        raise RuntimeError(reason)
    sshd = ensure_sshd()
    os.makedirs("/run/sshd", exist_ok=True)   # sshd's privilege-separation directory
    os.makedirs("/root/.ssh", mode=0o700, exist_ok=True)   # bind-mount target only
    names = [f"hvdl-{chr(ord('a') + i)}" for i in range(count)]
    subnet = _pick_subnet()
    addresses = [f"{_SUBNET_BASE}.{subnet}.{i + 1}" for i in range(count)]
    workdir = tempfile.mkdtemp(prefix="hvdlite-hosts-")
    holders: List[subprocess.Popen] = []
    forwarder: Optional[subprocess.Popen] = None
    use_delay_line = bool(delay_ms) and count == 2 and not netem_available()
    try:
        _prepare_files(workdir, names, addresses)
        for _ in names:
            holders.append(subprocess.Popen(
                ["unshare", "--net", "--uts", "--mount", "--propagation", "private",
                 "sleep", "infinity"], stdin=subprocess.DEVNULL))
        own_net = os.readlink("/proc/self/ns/net")
        deadline = time.monotonic() + 30
        for h in holders:
            while True:
                try:
                    if os.readlink(f"/proc/{h.pid}/ns/net") != own_net:
                        break
                except OSError:
                    pass
                if h.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("unshare did not create the host namespaces")
                time.sleep(0.01)
        cluster = Cluster(names, addresses, [h.pid for h in holders], workdir)
        first = names[0]
        # veth pairs created inside the first host: the root namespace never sees them.
        if use_delay_line:
            for name in names:
                cluster.run(name, ["ip", "tuntap", "add", "dev", delay_line.DEVICE, "mode",
                                   "tap"], check=True)
            forwarder = subprocess.Popen(
                [sys.executable, delay_line.__file__, str(cluster.pids[names[0]]),
                 str(cluster.pids[names[1]]), str(delay_ms)],
                stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
            if forwarder.stdout.readline().strip() != "ready":
                raise RuntimeError("the delay line did not start")
            cluster.delay_line_ms = float(delay_ms)
            first_device = delay_line.DEVICE
        elif count == 2:
            cluster.run(first, ["ip", "link", "add", "veth0", "type", "veth", "peer", "name",
                                "veth0", "netns", str(cluster.pids[names[1]])], check=True)
            first_device = "veth0"
        else:
            first_device = "br0"
            switch = ["ip link add br0 type bridge", "ip link set br0 up"]
            for i, other in enumerate(names[1:], start=1):
                switch += [f"ip link add veth{i} type veth peer name veth0 netns "
                           f"{cluster.pids[other]}",
                           f"ip link set veth{i} master br0", f"ip link set veth{i} up"]
            cluster.run(first, ["sh", "-c", " && ".join(switch)], check=True)
        for name, address in zip(names, addresses):
            device = first_device if name == first or use_delay_line else "veth0"
            # Nothing shared in memory between hosts: a /dev/shm of its own, and a boot id
            # of its own (UCX, under MPICH, takes one boot id for one machine and would use
            # shared memory and cross-memory attach between the hosts instead of TCP). UCX
            # finds its TCP devices in /sys/class/net, so /sys shows this host's network.
            _write(os.path.join(workdir, f"boot_id.{name}"), str(uuid.uuid4()) + "\n")
            setup = (f"hostname {name} && ip link set lo up && "
                     f"mount --bind {workdir}/hosts /etc/hosts && "
                     f"mount -t tmpfs tmpfs /dev/shm && "
                     f"mount -t sysfs sysfs /sys && "    # /sys/class/net of this host's network
                     f"mount --bind {workdir}/boot_id.{name} /proc/sys/kernel/random/boot_id && "
                     f"mount --bind {workdir}/ssh /root/.ssh && "
                     f"ip link set {device} up && ip addr add {address}/24 dev {device} && "
                     + " && ".join(f"{sshd} -f {workdir}/sshd_{p}.conf"
                                   for p in (22, ALT_SSH_PORT)))
            cluster.run(name, ["sh", "-c", setup], check=True, timeout=60)
        _wait_for_ssh(cluster)
        if rate or (delay_ms and not use_delay_line):
            cluster.shape(rate=rate, delay_ms=None if use_delay_line else delay_ms)
        yield cluster
    finally:
        if forwarder is not None:
            forwarder.kill()
            forwarder.wait()
        for h in holders:
            _kill_namespace(h.pid)
            h.kill()
            h.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def _wait_for_ssh(cluster: Cluster) -> None:
    first = cluster.names[0]
    deadline = time.monotonic() + 30
    for name in cluster.names:
        while True:
            proc = cluster.run(first, ["ssh", name, "hostname"], timeout=20)
            if proc.returncode == 0 and proc.stdout.strip() == name:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"ssh {name} from {first} does not work: {proc.stderr.strip()}")
            time.sleep(0.1)


def _kill_namespace(holder_pid: int) -> None:
    """SIGKILL every process left in the holder's network namespace (sshd, stray ranks)."""
    try:
        target = os.readlink(f"/proc/{holder_pid}/ns/net")
    except OSError:
        return
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in (me, holder_pid):
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/net") == target:
                os.kill(int(entry), 9)
        except OSError:
            pass
