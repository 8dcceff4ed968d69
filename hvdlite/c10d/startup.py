"""Who starts hvdlite's engine under torch.distributed, and who stops it.

``init_process_group("hvdlite")`` starts the engine, or joins the one ``hvdlite.init()``
started; the default group's ``shutdown()`` (``destroy_process_group()``) stops it only where
it was started here, and the job's process sets go with it.
"""

import sys

import hvdlite
from hvdlite.exceptions import HvdliteInvalidArgumentError

from .group_sets import forget_sets

_started_engine = False   # whether this module started hvdlite's engine (and so stops it)
_default_group = None


def start_engine():
    global _started_engine
    if not hvdlite.is_initialized():
        hvdlite.init(process_sets="dynamic")
        _started_engine = True


def check_launch(rank, size, what):
    """The default group's rank and size, as torch.distributed was given them, are the
    engine's (one process per rank, started by hvdlite-run or mpirun)."""
    if size != hvdlite.size() or rank != hvdlite.rank():
        raise HvdliteInvalidArgumentError(
            f"{what}: torch.distributed was given rank {rank} of {size}, but hvdlite's engine "
            f"runs rank {hvdlite.rank()} of {hvdlite.size()}; launch with hvdlite-run or "
            f"mpirun (one process per rank) and use init_method='hvdlite://'")


def adopt_default_group(group):
    global _default_group
    _default_group = group


def shutdown_if_default(group):
    """``group``'s shutdown or abort: the default group's stops what start_engine started."""
    global _started_engine, _default_group
    if group is _default_group:
        _default_group = None
        forget_sets()
        if _started_engine and hvdlite.is_initialized():
            hvdlite.shutdown()
        _started_engine = False


def show_errors_before_abort():
    """Keep a failing rank's traceback visible.

    init_process_group wraps sys.excepthook in one that sends stderr into a buffer while the
    previous hook runs, and prints the buffer afterwards; hvdlite's hook (installed by
    hvdlite.init) ends the job with MPI_Abort inside that call, so the buffer was never
    printed. Wrapped here, before torch wraps it, hvdlite's hook writes to the real stderr.
    """
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
