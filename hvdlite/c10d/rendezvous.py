"""The ``hvdlite://`` rendezvous, and when a call to ``init_process_group`` gets it.

``hvdlite://`` takes rank and world size from hvdlite's engine; a key-value store's address
(torch's TCPStore on rank 0) travels to the other ranks through the engine.

Note [start-up without init_method]
torch's init_process_group falls back to init_method="env://" when given neither an
init_method nor a store, and env:// stops at once where torchrun's MASTER_ADDR / MASTER_PORT
are missing, which is every hvdlite-run or mpirun job. c10d has no hook between choosing the
backend and choosing the rendezvous, so the adapter wraps torch.distributed's
init_process_group: for an "hvdlite" CPU backend, no init_method, no store and no
MASTER_ADDR / MASTER_PORT, the rendezvous is hvdlite:// (rank and size from the engine).
Every other call reaches torch's function unchanged.
"""

import os
import socket
from urllib.parse import parse_qs, urlparse

import numpy as np

import hvdlite
from hvdlite import ops
from hvdlite.exceptions import HvdliteInvalidArgumentError

BACKEND = "hvdlite"
_ADDRESS_BYTES = 256


def check_url(url):
    """An ``hvdlite://`` URL's ``rank`` / ``world_size`` (optional) are the engine's."""
    query = {k: int(v[0]) for k, v in parse_qs(urlparse(url).query).items()
             if k in ("rank", "world_size")}
    for key, mine in (("rank", hvdlite.rank()), ("world_size", hvdlite.size())):
        if query.get(key, -1) not in (-1, mine):
            raise HvdliteInvalidArgumentError(
                f"init_process_group(init_method='hvdlite://'): {key}={query[key]} was given "
                f"but hvdlite's engine runs {key} {mine}; leave {key} out")


def store_host():
    """The host rank 0's store listens on: loopback where every rank is on its host."""
    return "127.0.0.1" if hvdlite.local_size() == hvdlite.size() else socket.gethostname()


def share_address(address):
    """Rank 0's ``"host:port"`` (``address``; ignored elsewhere), on every rank, as
    (host, port), through the engine."""
    buf = np.zeros(_ADDRESS_BYTES, np.uint8)
    if hvdlite.rank() == 0:
        buf[:len(address)] = np.frombuffer(address.encode(), np.uint8)
    ops.broadcast_async(buf, 0, name="c10d.rendezvous").wait()
    host, port = bytes(buf).rstrip(b"\0").decode().rsplit(":", 1)
    return host, int(port)


def hvdlite_on_cpu(backend):
    """Whether the backend string puts CPU tensors on hvdlite ("hvdlite", "cpu:hvdlite,...")."""
    if backend is None:
        return False
    for part in str(backend).lower().split(","):
        device, _, name = part.strip().rpartition(":")
        if name == BACKEND and device in ("", "cpu"):
            return True
    return False


def needs_hvdlite_rendezvous(arguments, environ=os.environ):
    """Whether ``init_process_group(**arguments)`` gets ``init_method="hvdlite://"``
    (Note [start-up without init_method])."""
    return (hvdlite_on_cpu(arguments.get("backend")) and arguments.get("init_method") is None
            and arguments.get("store") is None
            and not ("MASTER_ADDR" in environ and "MASTER_PORT" in environ))
