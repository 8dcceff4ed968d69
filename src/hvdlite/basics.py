"""init / shutdown and the job's topology queries (shared by every adapter)."""

import atexit
import os
import signal
import sys
import time
import traceback
import threading

from . import _core, _device, mpi_library, policy, config, work, process_sets as _process_sets
from .contract import elastic_env as _elastic_settings
from .policy import launch_environment
from .contract.markers import ABORT_MARKER, GUARDED_ENV
from .exceptions import HvdliteLaunchError

_atexit_registered = False
_hook_lock = threading.Lock()


def init(comm=None, process_sets=None):
    """Start hvdlite's background engine on this rank (MPI is initialised if needed).

    Safe to call more than once. ``comm`` is accepted for Horovod compatibility; only the
    world communicator is supported. ``process_sets``: ProcessSet objects to register now (every
    rank passes the same list), or ``"dynamic"`` to allow ``add_process_set`` later (as
    HVDLITE_DYNAMIC_PROCESS_SETS=1 does).
    """
    global _atexit_registered
    if comm is not None:
        raise ValueError("hvdlite.init(comm=...) is not supported: hvdlite uses MPI_COMM_WORLD")
    if _core.is_initialized():
        return
    settings = config.read()  # a bad HVDLITE_*/HOROVOD_* value fails here, naming it
    policy.reset_name_counters()
    work.forget_all()
    # Open MPI busy-polls while it waits; on a machine where ranks share cores with the
    # framework's threads that steals their CPU. Yielding costs nothing when cores are free
    # (measured with examples/torch_bench.py). Read by MPI_Init; the user's setting wins.
    os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    if _elastic_settings.is_elastic_job():
        # MPI_Finalize starts with a runtime fence over every process the job ever had; after
        # a lost rank, Open MPI 5's runtime sometimes never completes it (measured: 2 jobs
        # in 35 had their survivors spin in MPI_Finalize forever). hvdlite's shutdown is
        # already agreed by every live rank, so nothing of hvdlite's is in flight to wait for.
        os.environ.setdefault("OMPI_MCA_async_mpi_finalize", "1")
    with _hook_lock:
        if not _atexit_registered:
            # Registered first: MPI must be finalized at exit even if init() itself fails.
            atexit.register(_at_exit)
            _install_excepthook(settings["abort_on_error"])
            _atexit_registered = True
    _device.tell_core()  # the nvidia-* wheels' libraries, for CUDA tensors
    mpi_library.load()   # the MPI library and its plugin (Note [one wheel, any MPI])
    _core.init()
    if not _elastic_settings.is_elastic_job():   # an elastic world changes size by design
        try:
            launch_environment.check_world_size(
                _core.size(), os.environ, _core.build_info().get("mpi_library_version", ""))
        except HvdliteLaunchError:
            _core.shutdown()   # a singleton engine: nothing of another rank's waits on it
            raise
    _process_sets._init_process_sets(process_sets)


def shutdown():
    """Stop the engine on this rank. Pending operations on other ranks fail with a clear error."""
    _core.shutdown()
    work.forget_all()


def start_timeline(file_path, mark_cycles=False):
    """Start writing a Chrome trace of every collective to ``file_path`` (as Horovod's).

    Call it on every rank: rank 0 writes the file (every rank writes its own, named
    ``stem.RANK.ext``, with ``HVDLITE_TIMELINE_ALL_RANKS=1``). A timeline already running is
    closed first. ``mark_cycles`` adds a marker for every negotiation round.
    """
    _core.start_timeline(str(file_path), bool(mark_cycles))


def stop_timeline():
    """Finish and close the timeline started by ``start_timeline`` or ``HVDLITE_TIMELINE``."""
    _core.stop_timeline()


def _at_exit():
    _core.shutdown()
    _core.finalize()


def _show_exception(previous, exc_type, exc, tb):
    """The unhandled exception as ``previous`` shows it, in one write where that is Python's
    own hook: its C printer writes each source line's indentation apart from the line, and
    under Open MPI 4's tagged output each write can become a line of its own, which breaks
    hvdlite-run's matching of the ranks' identical tracebacks."""
    if previous is not sys.__excepthook__:
        previous(exc_type, exc, tb)
        return
    try:
        sys.stderr.write("".join(traceback.format_exception(exc_type, exc, tb)))
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - a broken stderr: let Python's hook try
        previous(exc_type, exc, tb)


def _install_excepthook(abort_on_error):
    """An unhandled exception on one rank ends the whole job at once.

    Without this, the other ranks would wait forever in their next collective for a rank that
    is gone. The traceback is printed first, so the failing rank's own error is what the user
    sees. Set HVDLITE_ABORT_ON_ERROR=0 to turn it off.
    """
    if not abort_on_error:
        return
    previous = sys.excepthook
    if _elastic_settings.is_elastic_job():
        sys.excepthook = _leave_elastic_job_hook(previous)
        return

    def hook(exc_type, exc, tb):
        _show_exception(previous, exc_type, exc, tb)
        if exc_type is not KeyboardInterrupt and _core.is_initialized() and _core.size() > 1:
            sys.stderr.flush()
            sys.stdout.flush()
            # MPICH's Hydra proxy drops output still in flight when the abort kills the job
            # (a traceback was cut before its last line): give it a moment to forward it.
            time.sleep(0.25)
            if os.environ.get(GUARDED_ENV) == "1":   # tell hvdlite-run the job is ending
                sys.stderr.write(f"{ABORT_MARKER} rank={_core.rank()}\n")
                sys.stderr.flush()
            _core.abort(1)

    sys.excepthook = hook


def _leave_elastic_job_hook(previous):
    """In an elastic job an unhandled exception ends only this rank; the others go on.

    Under hvdlite-run's rank guard the rank exits with status 1 (the guard reports it, then
    ends as killed). Alone, it ends itself by SIGKILL: Open MPI's runtime ends a
    fault-tolerant job when a rank exits with an error status, and hangs when one exits 0
    before MPI_Finalize, while a killed rank is reported to the survivors as a lost process.
    """
    def hook(exc_type, exc, tb):
        _show_exception(previous, exc_type, exc, tb)
        if exc_type is not KeyboardInterrupt and _core.is_initialized() and _core.size() > 1:
            print(f"hvdlite: rank {_core.rank()} leaves the elastic job after an unhandled "
                  f"{exc_type.__name__}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            if os.environ.get(GUARDED_ENV) == "1":
                os._exit(1)
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def is_initialized() -> bool:
    return _core.is_initialized()


# The job's topology, as the core counts it (each raises before init()).

def rank() -> int:
    """This process's rank, 0 to ``size() - 1``."""
    return _core.rank()


def size() -> int:
    return _core.size()


def local_rank() -> int:
    """This process's rank among the ranks on its host (which GPU it takes, say)."""
    return _core.local_rank()


def local_size() -> int:
    return _core.local_size()


def cross_rank() -> int:
    """This host's index among the hosts: the rank of this process among the processes
    with its ``local_rank()``."""
    return _core.cross_rank()


def cross_size() -> int:
    return _core.cross_size()


def mpi_built() -> bool:
    """True: hvdlite always runs over MPI (so ``mpi_enabled`` and ``mpi_threads_supported``,
    Horovod's other names for the query, are this function)."""
    return True


def gloo_built() -> bool:
    """False: hvdlite has no Gloo, ROCm, oneCCL or DDL controller (``gloo_enabled``,
    ``rocm_built``, ``ccl_built`` and ``ddl_built``, Horovod's queries, are this function)."""
    return False


mpi_enabled = mpi_threads_supported = mpi_built
gloo_enabled = rocm_built = ccl_built = ddl_built = gloo_built


def nccl_built() -> bool:
    """True when NCCL loads (at run time), so CUDA tensors can go through it."""
    _device.tell_core()  # before the first load: the nvidia-* wheels' folders count too
    return _core.nccl_built()


def cuda_built() -> bool:
    """True when a CUDA runtime loads (at run time: no CUDA code is compiled in), so the core
    takes CUDA tensors (staged through pinned host memory; see ``python -m hvdlite
    --check-build`` for the library found)."""
    return bool(_device.libraries()["cuda_runtime"]["loaded"])


def gpu_available(ext_base_name=None, verbose=False) -> bool:
    """Horovod's query (its tests skip GPU cases by it): whether GPU tensors of the framework
    ``ext_base_name`` can be reduced, i.e. :func:`cuda_built` (every adapter takes CUDA
    tensors once a CUDA runtime loads)."""
    return cuda_built()


def is_homogeneous() -> bool:
    """True when every host runs the same number of ranks."""
    return size() % local_size() == 0 and cross_size() * local_size() == size()


#: What the framework adapters re-export as they are.
BASICS = ("init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
          "cross_rank", "cross_size", "mpi_built", "mpi_enabled", "mpi_threads_supported",
          "nccl_built", "gloo_built", "gloo_enabled", "cuda_built", "rocm_built", "ccl_built",
          "ddl_built", "gpu_available", "is_homogeneous")
