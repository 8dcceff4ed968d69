"""Point-to-point between two ranks of a process set: ``send_async`` / ``recv_async``.

Not collective and never negotiated: a transfer goes straight to the set's own point-to-point
channel in the core (a duplicate of the set's communicator made when the set was, on every
member; csrc/transport/peer_channel.h), so it may run at any time next to the set's
collectives. Ranks are ranks of the process set. A receive takes the earliest message from
its source (``src=None``: from any rank) with its tag that no earlier receive took, as MPI
matches them; its size must equal the message's, or it fails naming both byte counts.

The buffers are the arrays' bytes: ``buffer`` is a C-contiguous numpy array of any dtype, or
a contiguous 1-d uint8 host tensor supporting DLPack (the torch adapter passes its tensors'
bytes so), left untouched (send) or unread (recv) until the transfer has finished. Nothing
over 2 GiB - 1 in one message.
"""
import threading
from typing import Callable, Optional

import numpy as np

from hvdlite import _core
from hvdlite.exceptions import HvdliteInvalidArgumentError
from hvdlite.process_sets import process_set_id

ANY_SOURCE = None


class PeerWork:
    """One transfer in flight. ``wait()`` blocks (interruptible, the GIL released) and returns
    the sending rank (this rank for a send), or raises the transfer's error; ``poll()`` says
    whether it has finished (with or without one). ``finish`` runs once, after the
    transfer succeeded (e.g. copying a received buffer into a non-contiguous tensor)."""

    def __init__(self, transfer, finish: Optional[Callable[[], None]] = None):
        self._transfer = transfer
        self._finish = finish
        self._lock = threading.Lock()
        self._finished = False

    def _after(self):
        with self._lock:
            if self._finished:
                return
            self._finished = True
            finish, self._finish = self._finish, None
        if finish is not None:
            finish()

    def poll(self) -> bool:
        if self._finished:
            return True
        try:
            if not self._transfer.poll():
                return False
        except Exception:  # noqa: BLE001 - finished with an error, which wait() raises
            return True
        self._after()
        return True

    def wait(self, timeout: Optional[float] = None) -> int:
        if not self._finished:
            self._transfer.wait(timeout)
            self._after()
        return self._transfer.source

    @property
    def source(self) -> int:
        """The sender's rank in the process set, once a receive has finished."""
        return self._transfer.source


def _bytes(buffer, what):
    """A numpy array's bytes, in place (other arrays are passed on as they are)."""
    if not isinstance(buffer, np.ndarray):
        return buffer
    if not buffer.flags.c_contiguous:
        raise HvdliteInvalidArgumentError(
            f"{what}: the array (shape {list(buffer.shape)}, strides {list(buffer.strides)}) is "
            f"not C-contiguous; pass numpy.ascontiguousarray(x) (and copy a received one back)")
    return buffer.reshape(-1).view(np.uint8)


def send_async(buffer, dst: int, tag: int = 0, process_set=None, finish=None) -> PeerWork:
    """Starts sending ``buffer``'s bytes to rank ``dst`` of the process set."""
    return PeerWork(_core.peer_send(_bytes(buffer, "send"), int(dst), int(tag),
                                    process_set_id(process_set)), finish)


def recv_async(buffer, src: Optional[int] = ANY_SOURCE, tag: int = 0, process_set=None,
               finish=None) -> PeerWork:
    """Starts receiving into ``buffer`` from rank ``src`` of the process set (None: any)."""
    peer = -1 if src is None else int(src)
    return PeerWork(_core.peer_recv(_bytes(buffer, "recv"), peer, int(tag),
                                    process_set_id(process_set)), finish)
