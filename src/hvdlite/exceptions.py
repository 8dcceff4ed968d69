"""Errors raised by hvdlite. Every error is an :class:`HvdliteError`.

The C++ core reports one status code per failure; ``STATUS_TO_ERROR`` maps each
code to the class raised in Python (the core's bindings use this table).
"""


class HvdliteError(RuntimeError):
    """Base class of every error hvdlite raises."""

    # A plain constructor lets TensorFlow's autograph re-raise our errors as themselves
    # (with the user's source line) when one is raised while a tf.function is traced,
    # instead of wrapping them in a StagingError.
    __init__ = Exception.__init__


class HvdliteNotInitializedError(HvdliteError):
    """A collective or query was called before ``hvdlite.init()`` (or after shutdown)."""


class HvdliteInvalidArgumentError(HvdliteError, ValueError):
    """Bad local input (dtype, layout, duplicate name, ...), raised before anything is sent."""


class HvdliteUnsupportedError(HvdliteInvalidArgumentError, NotImplementedError):
    """A request hvdlite cannot run (Adasum, a sparse all-reduce with Min...).

    Also a NotImplementedError, which is what Horovod raises in these cases.
    """


class HvdliteMismatchError(HvdliteError):
    """Ranks submitted incompatible requests for one tensor name (shape, dtype, op, root...).

    Raised on every rank; the message names the tensor, the differing values and the ranks.
    """


class HvdliteShutdownError(HvdliteError):
    """The operation could not complete because hvdlite was shut down on some rank."""


class HvdliteInternalError(HvdliteError):
    """The transport (MPI) failed; the engine stops."""


class HvdliteOutOfMemoryError(HvdliteError, MemoryError):
    """Some rank could not allocate the output of a collective (an all-gather larger than its
    free memory). Raised on every rank, naming the ranks and the size; nothing was sent, and
    later collectives work as before."""


class HvdliteDeadlockError(HvdliteError):
    """Every member of a process set was blocked waiting, for longer than
    ``HVDLITE_DEADLOCK_TIME_SECONDS``, on requests no other member had submitted: nothing could
    ever complete. Raised on every rank for every request a thread was waiting on; the message
    says per rank what it waited for and who had submitted it. Later collectives work.

    Ranks waiting in different process sets on each other (every rank stuck for twice that
    time) get it too, with a message that starts "deadlock across process sets"; hvdlite has
    then stopped, and later collectives raise the same error."""


class HvdliteLaunchError(HvdliteError):
    """The job was launched so that hvdlite cannot run it as one job: the launcher started N
    processes but MPI's world holds another number (``srun`` without the MPI's plugin gives
    N worlds of one process each). Raised by ``init()`` on every rank, naming both numbers
    and how to launch instead (src/hvdlite/policy/launch_environment.py)."""


class HvdliteTimeoutError(HvdliteError, TimeoutError):
    """``wait(timeout=...)`` ran out of time. The request is still in flight: wait again, or
    let it finish in the background."""


class HvdliteRanksLostError(HvdliteInternalError):
    """A rank of the job died while this operation was pending.

    In an elastic job (``hvdlite.elastic.run``) the survivors catch it, rebuild hvdlite over
    themselves and roll back to the last commit; elsewhere it ends the job like any
    :class:`HvdliteInternalError`.
    """


class HvdliteHostsUpdatedInterrupt(RuntimeError):
    """Raised by ``state.commit()`` / ``check_host_updates()`` on every rank when hosts changed.

    ``hvdlite.elastic.run`` catches it and re-forms the job. ``skip_sync`` is true when no
    rank is added (hosts only removed): every rank that stays already holds the same state,
    while a new rank must receive it.
    """

    def __init__(self, skip_sync=False):
        super().__init__("the job's hosts changed")
        self.skip_sync = skip_sync


# Horovod's names for the same errors (horovod.common.exceptions), for scripts that catch them.
HorovodInternalError = HvdliteInternalError
HostsUpdatedInterrupt = HvdliteHostsUpdatedInterrupt


def raise_replaced(error: BaseException, replacement: BaseException, chain: bool = True):
    """Raise ``replacement`` for the caught ``error`` (chained to it unless ``chain`` is
    false), or re-raise ``error`` when they are the same object.

    Call it as ``except E as e: raise_replaced(e, convert(e))``. A frame that keeps the
    raised exception in a local (``new = convert(e); raise new``) is itself in that
    exception's traceback: a cycle that keeps every tensor the frames hold alive until
    Python's cycle collector runs. Here no frame keeps it.
    """
    try:
        if replacement is error:
            raise error
        raise replacement from (error if chain else None)
    finally:
        error = replacement = None


# Must match hvdlite::Status in csrc/hvdlite.h.
STATUS_TO_ERROR = {
    1: HvdliteInvalidArgumentError,
    2: HvdliteNotInitializedError,
    3: HvdliteMismatchError,
    4: HvdliteShutdownError,
    5: HvdliteInternalError,
    6: HvdliteRanksLostError,
    7: HvdliteOutOfMemoryError,
    8: HvdliteDeadlockError,
    9: HvdliteTimeoutError,
}
