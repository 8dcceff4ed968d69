"""Which MPI ``hvdlite-run`` drives, and how to say each thing in that MPI's command line.

Three dialects:

=================  ==========================  ============================================
                   Open MPI 4.x / 5.x          MPICH, Intel MPI (Hydra)
=================  ==========================  ============================================
rank-tagged output ``--tag-output`` (4) /      ``-prepend-pattern '[%r]<hvdl>: '``
                   ``--output tag`` (5)         (Intel MPI: ``-prepend-rank``)
environment        ``-x NAME`` per variable     ``-genv NAME VALUE`` per variable
oversubscription   ``--oversubscribe``          always allowed (nothing to say)
binding            ``--bind-to none``           ``-bind-to none``
run as root        OMPI_ALLOW_RUN_AS_ROOT(...)  nothing needed
hosts              ``--host a:2,b:2``           ``-hosts a:2,b:2``
hostfile           ``--hostfile F``             ``-f F``
                   (``host slots=N`` lines)     (``host:N`` lines)
TCP interface      ``--mca btl_tcp_if_include`` ``-iface IF``
                   (+ the runtime's oob)
ssh port/identity  ``plm_rsh_args`` (4) /       ``-launcher-exec`` a small ssh wrapper
                   ``plm_ssh_args`` (5)
remote daemons     (4) ``orte_launch_agent``    nothing needed
                   = ``env PATH=.. orted``
=================  ==========================  ============================================

The flavour comes from the loaded MPI library's version text (``hvdlite.mpi_library``) for the
mpirun beside that library, and from ``mpirun --version`` for any other.
"""

import os
import re
import shlex
import stat
import subprocess
from typing import Dict, List, Optional, Pattern, Sequence, Tuple

Hosts = List[Tuple[str, Optional[int]]]   # (host, slots or None where not given)


class UnknownMPI(Exception):
    """``mpirun --version`` did not name an MPI that hvdlite-run knows."""


class Dialect:
    """How one MPI family spells what hvdlite-run asks of it."""

    name = "?"
    chunked_tags = False   # True where the tag marks each chunk a rank writes, not each line
    # True where -H must become a hostfile: the MPI's own host list cannot give slot counts.
    host_list_in_file = False
    # The prefix the launcher's output carries for each rank's line; group "rank".
    tag: Pattern[bytes]

    def __init__(self, version: str):
        self.version = version

    def describe(self) -> str:
        return f"{self.name} {self.version}".strip()

    def launcher_program(self, mpirun: str) -> str:
        """The program to start for ``mpirun``: hvdlite-run must be able to signal it."""
        return mpirun

    # Each method returns argv pieces (or environment) for mpirun.
    def tag_output(self) -> List[str]:
        raise NotImplementedError

    def forward_env(self, names: Sequence[str], env: Dict[str, str]) -> List[str]:
        """Arguments that give every rank, on every host, these variables of ``env``."""
        raise NotImplementedError

    def oversubscribe(self) -> List[str]:
        raise NotImplementedError

    def no_binding(self) -> List[str]:
        raise NotImplementedError

    def root_env(self) -> Dict[str, str]:
        return {}

    # How this MPI spells hosts: the flag of a host list (whose entries are host:slots), the
    # flag of a hostfile, and a host's slots on a hostfile line.
    host_list_flag = hostfile_flag = ""
    hostfile_slots = ""

    def host_list(self, hosts: Hosts) -> List[str]:
        return [self.host_list_flag, ",".join(h if n is None else f"{h}:{n}" for h, n in hosts)]

    def hostfile_text(self, hosts: Hosts) -> str:
        return "".join(h + ("" if n is None else self.hostfile_slots.format(n)) + "\n"
                       for h, n in hosts)

    def hostfile(self, path: str) -> List[str]:
        return [self.hostfile_flag, path]

    def network_interface(self, iface: str) -> List[str]:
        raise NotImplementedError

    def ssh(self, port: Optional[int], identity: Optional[str], workdir: str) -> List[str]:
        raise NotImplementedError

    def fault_tolerance(self) -> Optional[List[str]]:
        """Flags for a job that survives lost ranks (ULFM), or None where the MPI has none."""
        return None

    # Where fault_tolerance() is None but users may expect ULFM: why, for the refusal.
    no_fault_tolerance = ""

    def remote_daemons(self, env: Dict[str, str]) -> List[str]:
        """Flags that let the MPI's own daemons start on other hosts with this environment's
        paths to the MPI (forward_env reaches only the ranks, which the daemons start)."""
        return []


def _ssh_words(port: Optional[int], identity: Optional[str]) -> List[str]:
    words = []
    if port is not None:
        words += ["-p", str(port)]
    if identity:
        words += ["-i", identity]
    return words


class OpenMPI(Dialect):
    name = "Open MPI"
    # 5.x: "[1,0]<stdout>: text" (the space belongs to the tag); 4.x: "[1,0]<stdout>:text".
    tag = re.compile(rb"\[\d+,(?P<rank>\d+)\]<(?:stdout|stderr|stddiag)>: ")
    tag4 = re.compile(rb"\[\d+,(?P<rank>\d+)\]<(?:stdout|stderr|stddiag)>:")
    host_list_flag, hostfile_flag, hostfile_slots = "--host", "--hostfile", " slots={}"

    def __init__(self, version: str):
        super().__init__(version)
        if self.major < 5:
            self.tag = self.tag4

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    def tag_output(self):
        return ["--output", "tag"] if self.major >= 5 else ["--tag-output"]

    def fault_tolerance(self):
        # Open MPI 5 ships ULFM; with it, a killed rank is reported to the survivors.
        return ["--with-ft", "ulfm"] if self.major >= 5 else None

    def forward_env(self, names, env):
        return [word for name in names for word in ("-x", name)]

    # What Open MPI's orted needs to find itself, its libraries and its plugins.
    DAEMON_VARS = ("PATH", "LD_LIBRARY_PATH")
    DAEMON_PREFIXES = ("OPAL_", "PMIX_")

    def remote_daemons(self, env):
        # Open MPI 4's orted is started over ssh with the remote login's environment: an MPI
        # not installed system-wide (unpacked, or in a module's prefix) is not found there, and
        # --prefix assumes <prefix>/lib, not Debian's lib/<triplet>. So it is started through
        # `env` with this side's paths, as -x gives them to the ranks. (Open MPI 5's prted
        # finds its libraries through its RPATH.) The agent is split at spaces: a value with
        # one cannot be passed this way and is left to the remote login.
        if self.major >= 5:
            return []
        names = [n for n in sorted(env) if n in self.DAEMON_VARS or n.startswith(self.DAEMON_PREFIXES)]
        words = [f"{n}={env[n]}" for n in names if env[n] and not any(c.isspace() for c in env[n])]
        if not words:
            return []
        return ["--mca", "orte_launch_agent", " ".join(["env", *words, "orted"])]

    def oversubscribe(self):
        return ["--oversubscribe"]

    def no_binding(self):
        return ["--bind-to", "none"]

    def root_env(self):
        return {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}

    def network_interface(self, iface):
        # MPI's own traffic (btl) and the runtime's out-of-band channel (5.x: PRRTE's).
        runtime = ["--prtemca"] if self.major >= 5 else ["--mca"]
        return ["--mca", "btl_tcp_if_include", iface, *runtime, "oob_tcp_if_include", iface]

    def ssh(self, port, identity, workdir):
        words = _ssh_words(port, identity)
        if not words:
            return []
        if self.major >= 5:
            return ["--prtemca", "plm_ssh_args", " ".join(map(shlex.quote, words))]
        return ["--mca", "plm_rsh_args", " ".join(map(shlex.quote, words))]


class Hydra(Dialect):
    """MPICH's process manager, also Intel MPI's (and MVAPICH's)."""

    name = "MPICH (Hydra)"
    chunked_tags = True
    tag = re.compile(rb"\[(?P<rank>\d+)\]<hvdl>: ")
    host_list_flag, hostfile_flag, hostfile_slots = "-hosts", "-f", ":{}"
    # Tried with MPICH 5.0.2 (PyPI, ch4; Debian's 4.0.2 is ch4 too, with the same stubs in
    # its source): every MPIX_Comm_* call hits MPIR_Assert(0) even on a healthy communicator,
    # MPIR_CVAR_ENABLE_FT=1 aborts in MPI_Init, and under -disable-auto-cleanup a killed
    # rank's peers never get an error from their pending collective (the job mostly ends
    # within a second; or they hang).
    no_fault_tolerance = ("MPICH declares ULFM's MPIX_Comm_shrink/revoke/agree, but its ch4 "
                          "device aborts in them (\"Assertion failed in file "
                          ".../ch4_comm.c\") and gives a killed rank's peers no error")

    def __init__(self, version: str, name: str = "MPICH (Hydra)"):
        super().__init__(version)
        self.name = name

    def tag_output(self):
        return ["-prepend-pattern", "[%r]<hvdl>: "]

    def forward_env(self, names, env):
        # Values, not -genvlist names: with -genvlist, MPICH 5.0's remote proxies were seen
        # to drop the variables under some PATHs (tests/multihost), -genv never.
        return [word for name in names for word in ("-genv", name, env[name])]

    def oversubscribe(self):
        return []   # Hydra places ranks round-robin over the slots and wraps around

    def no_binding(self):
        return ["-bind-to", "none"]

    def network_interface(self, iface):
        return ["-iface", iface]

    def ssh(self, port, identity, workdir):
        words = _ssh_words(port, identity)
        if not words:
            return []
        # -launcher-exec takes one program, so the options go into a wrapper script.
        path = os.path.join(workdir, "ssh")
        with open(path, "w") as f:
            f.write("#!/bin/sh\nexec ssh %s \"$@\"\n" % " ".join(map(shlex.quote, words)))
        os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        return ["-launcher", "ssh", "-launcher-exec", path]


class IntelHydra(Hydra):
    """Intel MPI's Hydra; its documented rank prefix is ``-prepend-rank`` ("[rank] text")."""

    tag = re.compile(rb"\[(?P<rank>\d+)\] ")
    # Tried with Intel MPI 2021.18 (PyPI): MPIX_Comm_shrink and _agree crash (SIGSEGV) even on
    # a healthy communicator, with or without MPIR_CVAR_ENABLE_FT=1, and under
    # -disable-auto-cleanup a killed rank's peers wait in their collective.
    no_fault_tolerance = ("Intel MPI exports ULFM's MPIX_Comm_shrink/agree, but they crash "
                          "(SIGSEGV) even with no rank lost, and a killed rank's peers get no "
                          "error")
    # Intel's -hosts ignores ":N" (it places I_MPI_PERHOST ranks, a host's cores by
    # default, on each host in turn); a machine file's "host:N" lines are honoured.
    host_list_in_file = True
    hostfile_flag = "-machinefile"

    def __init__(self, version: str):
        super().__init__(version, name="Intel MPI (Hydra)")

    def tag_output(self):
        return ["-prepend-rank"]

    def launcher_program(self, mpirun):
        # Intel's mpirun is a shell script that runs mpiexec.hydra as its child: a SIGTERM
        # from hvdlite-run (a rank failed: end the job) stopped only the script, and the job
        # went on until Hydra gave up by itself, about 20 s later. Start Hydra directly.
        hydra = os.path.join(os.path.dirname(mpirun), "mpiexec.hydra")
        if not _is_script(mpirun) or not os.access(hydra, os.X_OK):
            return mpirun
        return hydra


def _is_script(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"#!"
    except OSError:
        return False


# ----------------------------------------------------------------------------------------
# detection

def from_version_text(text: str) -> Dialect:
    """The dialect named by ``mpirun --version`` output or by MPI_Get_library_version()."""
    m = re.search(r"\((?:Open MPI|OpenRTE)\)\s+v?(\d+\.\d+(?:\.\d+)?)", text) or \
        re.search(r"Open MPI v?(\d+\.\d+(?:\.\d+)?)", text)
    if m:
        version = m.group(1)
        if int(version.split(".")[0]) < 4:
            raise UnknownMPI(f"Open MPI {version} is older than hvdlite-run supports (4.x, 5.x)")
        return OpenMPI(version)
    m = re.search(r"Intel\(R\) MPI Library.*?(?:Version\s+)?(\d{4}(?:\.\d+)*)", text)
    if m:
        return IntelHydra(m.group(1))
    m = re.search(r"HYDRA build details:\s*Version:\s*(\S+)", text) or \
        re.search(r"MPICH Version:\s*(\S+)", text)
    if m:
        return Hydra(m.group(1))
    raise UnknownMPI("not an MPI hvdlite-run knows")


def first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return "(nothing)"


def detect(mpirun: str, built_mpirun: Optional[str], built_library: str,
           env: Optional[Dict[str, str]] = None) -> Dialect:
    """The dialect of ``mpirun``; raises UnknownMPI with a one-line reason."""
    if built_mpirun and built_library and _same_file(mpirun, built_mpirun):
        try:
            return from_version_text(built_library)
        except UnknownMPI:
            pass   # ask the program itself
    try:
        proc = subprocess.run([mpirun, "--version"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True,
                              errors="replace", timeout=30, env=env)
        text = proc.stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UnknownMPI(f"`{mpirun} --version` failed: {e}")
    try:
        return from_version_text(text)
    except UnknownMPI as e:
        what = "" if str(e) == "not an MPI hvdlite-run knows" else f" ({e})"
        raise UnknownMPI(f"{mpirun} is not an MPI launcher hvdlite-run knows{what}: "
                         f"`{os.path.basename(mpirun)} --version` printed "
                         f"{first_line(text)!r}")


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
