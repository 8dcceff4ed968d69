"""Start-up under torch.distributed: who starts hvdlite's engine and who stops it, the
``hvdlite://`` rendezvous, and which ``init_process_group`` calls get it.

``init_process_group("hvdlite")`` starts the engine, or joins the one ``hvdlite.init()``
started; the default group's shutdown (``destroy_process_group()``) stops it only where it was
started here, and the job's process sets go with it. ``hvdlite://`` takes rank and world size
from the engine; the address of torch's store (a TCPStore on rank 0) travels through it.

Note [start-up without init_method]
torch's init_process_group falls back to init_method="env://" when given neither an
init_method nor a store, and env:// stops at once where any of torchrun's MASTER_ADDR,
MASTER_PORT, RANK and WORLD_SIZE is missing, which is every hvdlite-run or mpirun job, and
every sbatch script written for torchrun that exports MASTER_ADDR / MASTER_PORT only ("environment
variable RANK expected, but not set"). c10d has no hook between choosing the backend and
choosing the rendezvous, so the adapter wraps init_process_group: for an "hvdlite" CPU
backend with no init_method and no store, unless all four are set, the rendezvous is
hvdlite://. Rank and world size are the engine's (a RANK or WORLD_SIZE that is set must
agree: it goes into the URL, which check_url checks); where MASTER_ADDR and MASTER_PORT are
both set, the URL is hvdlite://MASTER_ADDR:MASTER_PORT and rank 0 hosts torch's store
there. That host must be rank 0's (the ranks are the MPI launcher's, not torchrun's), else
every rank gets an error saying so. Only the URL places the store: a plain hvdlite:// given
by the caller ignores MASTER_ADDR / MASTER_PORT (a script may have set them for a gloo group
of its own earlier, whose port may still be taken).
With all four set, torch's env:// runs (adopt_default_group checks its rank against the
engine's). Every other call reaches torch's function unchanged.
"""

import os
import socket
import sys
from urllib.parse import parse_qs, urlparse

import numpy as np

import hvdlite
from hvdlite import ops
from hvdlite.exceptions import HvdliteInvalidArgumentError

from .group_sets import forget_sets

BACKEND = "hvdlite"
_started_engine = False   # whether this module started hvdlite's engine (and so stops it)
_default_group = None


def start_engine():
    global _started_engine
    if not hvdlite.is_initialized():
        hvdlite.init(process_sets="dynamic")
        _started_engine = True


def adopt_default_group(group, rank, size):
    """``group`` is the job's default; torch.distributed's ``rank`` / ``size`` for it must be
    the engine's (one process per rank, started by hvdlite-run or mpirun)."""
    global _default_group
    if size != hvdlite.size() or rank != hvdlite.rank():
        raise HvdliteInvalidArgumentError(
            f"init_process_group({BACKEND!r}): torch.distributed was given rank {rank} of "
            f"{size}, but hvdlite's engine runs rank {hvdlite.rank()} of {hvdlite.size()}; "
            f"launch with hvdlite-run or mpirun (one process per rank) and use "
            f"init_method='hvdlite://'")
    _default_group = group


def shutdown_if_default(group):
    """A group's shutdown or abort: the default group's stops what start_engine started."""
    global _started_engine, _default_group
    if group is _default_group:
        _default_group = None
        forget_sets()
        if _started_engine and hvdlite.is_initialized():
            hvdlite.shutdown()
        _started_engine = False


def show_errors_before_abort():
    """Keep a failing rank's traceback visible: init_process_group wraps sys.excepthook in one
    that sends stderr into a buffer while the previous hook runs, and prints it afterwards;
    hvdlite's hook ends the job with MPI_Abort inside that call, so the buffer was never
    printed. Wrapped here, before torch wraps it, hvdlite's hook writes to the real stderr."""
    inner = sys.excepthook
    if getattr(inner, "_hvdlite_c10d", False):
        return

    def hook(*args):
        redirected, sys.stderr = sys.stderr, sys.__stderr__
        try:
            inner(*args)
        finally:
            sys.stderr = redirected
    hook._hvdlite_c10d = True
    sys.excepthook = hook


def check_url(url):
    """An ``hvdlite://`` URL's ``rank`` / ``world_size`` (optional) are the engine's."""
    query = parse_qs(urlparse(url).query)
    for key, mine in (("rank", hvdlite.rank()), ("world_size", hvdlite.size())):
        given = int(query.get(key, [-1])[0])
        if given not in (-1, mine):
            raise HvdliteInvalidArgumentError(
                f"init_process_group(init_method='hvdlite://'): {key}={given} was given but "
                f"hvdlite's engine runs {key} {mine}; leave {key} out")


def store_host():
    """Where rank 0's store listens: loopback where every rank is on its host."""
    return "127.0.0.1" if hvdlite.local_size() == hvdlite.size() else socket.gethostname()


def share_address(address):
    """Rank 0's ``"host:port"`` (``address``, ignored elsewhere) as (host, port) on every
    rank, broadcast through the engine."""
    buf = np.zeros(256, np.uint8)
    if hvdlite.rank() == 0:
        buf[:len(address)] = np.frombuffer(address.encode(), np.uint8)
    ops.broadcast_async(buf, 0, name="c10d.rendezvous").wait()
    host, port = bytes(buf).rstrip(b"\0").decode().rsplit(":", 1)
    if host.startswith(NOT_RANK_0S_HOST):   # rank 0 could not host the store: every rank says so
        raise master_address_not_here(host[1:], port)
    return host, int(port)


def hvdlite_on_cpu(backend):
    """Whether the backend string puts CPU tensors on hvdlite ("hvdlite", "cpu:hvdlite,...")."""
    parts = (p.strip().rpartition(":") for p in str(backend or "").lower().split(","))
    return any(name == BACKEND and device in ("", "cpu") for device, _, name in parts)


TORCHRUN_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")


def needs_hvdlite_rendezvous(arguments, environ=os.environ):
    """Whether ``init_process_group(**arguments)`` gets the :func:`rendezvous_url` (Note
    [start-up without init_method])."""
    return (hvdlite_on_cpu(arguments.get("backend")) and arguments.get("init_method") is None
            and arguments.get("store") is None
            and not all(name in environ for name in TORCHRUN_VARIABLES))


def rendezvous_url(environ=os.environ):
    """``hvdlite://``, at MASTER_ADDR:MASTER_PORT where both are set, with the RANK /
    WORLD_SIZE that are set, for check_url to hold against the engine's."""
    given = [f"{key}={environ[name]}" for name, key in (("RANK", "rank"),
                                                        ("WORLD_SIZE", "world_size"))
             if name in environ]
    master = master_address(environ)
    where = ""
    if master is not None:
        host, port = master
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return f"hvdlite://{where}" + ("?" + "&".join(given) if given else "")


def store_address(url):
    """(host, port) where an ``hvdlite://HOST:PORT`` URL places rank 0's store, else None
    (the engine picks)."""
    parsed = urlparse(url)
    if not parsed.netloc:
        return None
    try:
        host, port = parsed.hostname, parsed.port
    except ValueError:
        host = port = None
    if not host or not port:
        raise HvdliteInvalidArgumentError(
            f"init_process_group(init_method={url!r}): expected hvdlite://HOST:PORT (where "
            f"rank 0's store listens) or hvdlite:// alone")
    return host, port


def master_address(environ=os.environ):
    """(MASTER_ADDR, MASTER_PORT) where both are set, else None: where rank 0 hosts the store."""
    if "MASTER_ADDR" not in environ or "MASTER_PORT" not in environ:
        return None
    host, port = environ["MASTER_ADDR"].strip(), environ["MASTER_PORT"].strip()
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise HvdliteInvalidArgumentError(
            f"init_process_group({BACKEND!r}): MASTER_ADDR={environ['MASTER_ADDR']!r} / "
            f"MASTER_PORT={environ['MASTER_PORT']!r} do not make an address for rank 0's store "
            f"(a host and a TCP port 1-65535); unset both to let hvdlite choose one")
    return host, int(port)


def is_this_host(host):
    """Whether ``host`` names an address of this machine (one a socket can bind)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, kind, proto, _, address in infos:
        try:
            with socket.socket(family, kind, proto) as s:
                s.bind((address[0], 0))
            return True
        except OSError:
            continue
    return False


NOT_RANK_0S_HOST = "!"   # rank 0 shares this (and its host's name) where MASTER_ADDR is not its


def master_address_not_here(master_addr, rank0_host):
    return HvdliteInvalidArgumentError(
        f"init_process_group({BACKEND!r}): MASTER_ADDR={master_addr} (the store's host) is not "
        f"the host of rank 0 ({rank0_host}), which hosts torch's store under hvdlite-run, mpirun "
        f"or srun (the ranks are the MPI launcher's, not torchrun's). Set MASTER_ADDR to the "
        f"first host of the job "
        f"(in a Slurm batch script: $(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head "
        f"-n 1)), or unset MASTER_ADDR and MASTER_PORT and hvdlite picks the address")
