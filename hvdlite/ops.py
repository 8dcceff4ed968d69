"""Framework-free collectives: the layer every adapter (numpy, torch, TensorFlow) calls.

Tensors are any contiguous CPU array the core can read without a copy: numpy arrays
(buffer protocol) and objects with ``__dlpack__`` (torch, TF, JAX tensors). Each
``*_async`` call enqueues one request on the core's background thread and returns an int
handle at once; ``poll(handle)`` says whether it finished and ``wait(handle)`` blocks for
it, raising an :class:`~hvdlite.exceptions.HvdliteError` subclass on failure.

Who owns the output:
- allreduce and broadcast write into a caller-provided ``output`` (which may be the input
  itself, for the in-place forms);
- allgather, alltoall and reducescatter produce outputs whose size only the negotiation
  knows, so the core allocates them and ``wait`` returns them as a numpy array
  (``Result.output``). bfloat16 outputs come back as ``numpy.uint16`` holding the bits,
  with ``Result.bfloat16`` set: adapters view them as their framework's bfloat16.

References to every array passed in are held here until ``wait`` returns, so callers may
drop theirs.
"""

import itertools
import operator
import threading
from typing import Any, List, NamedTuple, Optional, Sequence

from . import _core
from .process_sets import process_set_id as _set_id

# Reduce ops, numbered as in Horovod so existing scripts that compare them keep working.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

_REDUCE_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max",
                    Product: "Product"}

# Wire compression understood by the core (float32/float64 tensors travel as 16-bit floats).
_COMPRESSION_CODES = {None: 0, "none": 0, "fp16": 1, "float16": 1, "bf16": 2, "bfloat16": 2}


class Result(NamedTuple):
    """What ``wait`` returns. Fields that do not apply to the op are None."""
    output: Any                      # core-allocated numpy array (allgather/alltoall/reducescatter)
    bfloat16: bool                   # output holds bfloat16 bits in a uint16 array
    received_splits: Optional[List[int]]  # alltoall: rows received from each rank
    last_joined_rank: Optional[int]  # join: the rank that joined last


_inflight_refs = {}   # handle -> arrays the core reads or writes until the handle completes
_refs_lock = threading.Lock()
_name_counters = {}
_counter_lock = threading.Lock()


def auto_name(kind: str, name: Optional[str], process_set: int = 0) -> str:
    """Horovod-style generated names: ranks that call ops in the same order get the same names.

    Counted per process set: members of a set agree on its order only.
    """
    if name is not None:
        return str(name)
    with _counter_lock:
        counter = _name_counters.setdefault((kind, process_set), itertools.count())
        return f"{kind}.noname.{next(counter)}"


def reset_name_counters() -> None:
    """Called by init/shutdown so a re-initialised job starts its generated names afresh."""
    with _counter_lock:
        _name_counters.clear()


def integer_arg(value, what: str, low: int = -2**63, high: int = 2**63 - 1) -> int:
    """The one check for every integer parameter (root_rank, splits, op, ...).

    Python and numpy integers pass (so do integer scalar tensors, through ``__index__``);
    bools, floats, strings and out-of-range values raise HvdliteInvalidArgumentError, never
    a truncation or a generic TypeError.
    """
    if isinstance(value, bool):
        raise _core_error(1, f"{what} must be an integer, got the bool {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise _core_error(1, f"{what} must be an integer, got {value!r} "
                             f"({type(value).__name__})") from None
    if not low <= v <= high:
        raise _core_error(1, f"{what} {v} is out of range [{low}, {high}]")
    return v


def root_rank_arg(root_rank) -> int:
    """A broadcast root: an integer rank of this job."""
    root = integer_arg(root_rank, "root_rank")
    if not 0 <= root < _core.size():
        raise _core_error(1, f"root rank {root} is out of range for {_core.size()} ranks")
    return root


def splits_arg(splits) -> List[int]:
    """alltoall splits: a sequence of non-negative integers (numpy arrays and lists alike)."""
    if isinstance(splits, (str, bytes)) or not hasattr(splits, "__iter__"):
        raise _core_error(1, f"splits must be a sequence of integers, got {splits!r}")
    return [integer_arg(s, "each split", 0) for s in splits]


def _check_reduce_op(op) -> int:
    op = integer_arg(op, "op")
    if op == Adasum:
        raise _core_error(1, "op=Adasum is not supported by hvdlite; use Average or Sum")
    if op not in _REDUCE_OP_NAMES:
        raise _core_error(1, f"unknown reduce op {op!r}; use hvdlite.Average, Sum, Min, Max or Product")
    return op


def _compression_code(compression) -> int:
    key = getattr(compression, "wire_dtype", compression)
    if key not in _COMPRESSION_CODES:
        raise _core_error(1, f"unknown compression {compression!r}; use None, 'fp16' or 'bf16'")
    return _COMPRESSION_CODES[key]


def _core_error(status: int, message: str):
    from .exceptions import STATUS_TO_ERROR
    return STATUS_TO_ERROR[status](message)


def _hold(handles: Sequence[int], refs) -> None:
    with _refs_lock:
        for h in handles:
            _inflight_refs[h] = refs


def allreduce_async(tensor, output=None, name: Optional[str] = None, op: int = Average,
                    prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    compression=None, process_set=None) -> int:
    """All-reduce ``tensor`` into ``output`` (default: in place)."""
    return grouped_allreduce_async([tensor], None if output is None else [output],
                                   None if name is None else [name], op, prescale_factor,
                                   postscale_factor, compression, process_set=process_set)[0]


def grouped_allreduce_async(tensors: Sequence, outputs: Optional[Sequence] = None,
                            names: Optional[Sequence[str]] = None, op: int = Average,
                            prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                            compression=None, process_set=None) -> List[int]:
    """All-reduce many tensors; they are enqueued together so they negotiate and fuse together."""
    ps = _set_id(process_set)
    tensors = list(tensors)
    outputs = tensors if outputs is None else list(outputs)
    if len(outputs) != len(tensors):
        raise _core_error(1, f"grouped_allreduce got {len(tensors)} tensors but {len(outputs)} outputs")
    if names is None:
        names = [auto_name("allreduce", None, ps) for _ in tensors]
    names = [str(n) for n in names]
    if len(names) != len(tensors):
        raise _core_error(1, f"grouped_allreduce got {len(tensors)} tensors but {len(names)} names")
    handles = _core.enqueue_allreduce(names, tensors, outputs, _check_reduce_op(op),
                                      float(prescale_factor), float(postscale_factor),
                                      _compression_code(compression), process_set=ps)
    _hold(handles, (tensors, outputs))
    return handles


def broadcast_async(tensor, root_rank: int, output=None, name: Optional[str] = None,
                    process_set=None) -> int:
    """Broadcast ``tensor`` from global rank ``root_rank`` into ``output`` (default: in place)."""
    output = tensor if output is None else output
    ps = _set_id(process_set)
    h = _core.enqueue_broadcast(auto_name("broadcast", name, ps), tensor, output,
                                root_rank_arg(root_rank), process_set=ps)
    _hold([h], (tensor, output))
    return h


def allgather_async(tensor, name: Optional[str] = None, process_set=None) -> int:
    """Concatenate every rank's ``tensor`` along dimension 0 (first dims may differ)."""
    ps = _set_id(process_set)
    h = _core.enqueue_allgather(auto_name("allgather", name, ps), tensor, process_set=ps)
    _hold([h], tensor)
    return h


def alltoall_async(tensor, splits: Optional[Sequence[int]] = None, name: Optional[str] = None,
                   process_set=None) -> int:
    """Send ``splits[i]`` rows of ``tensor`` to rank i (default: equal parts); receive likewise.

    In a process set, i counts the set's members.
    """
    ps = _set_id(process_set)
    split_list = [] if splits is None else splits_arg(splits)
    h = _core.enqueue_alltoall(auto_name("alltoall", name, ps), tensor, split_list, process_set=ps)
    _hold([h], tensor)
    return h


def reducescatter_async(tensor, name: Optional[str] = None, op: int = Average,
                        prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                        process_set=None) -> int:
    """Reduce ``tensor`` across ranks and give rank r its share of dimension 0.

    Dimension 0 is split as in Horovod: every rank gets ``n // size`` rows and the first
    ``n % size`` ranks one more.
    """
    ps = _set_id(process_set)
    h = _core.enqueue_reducescatter(auto_name("reducescatter", name, ps), tensor,
                                    _check_reduce_op(op), float(prescale_factor),
                                    float(postscale_factor), process_set=ps)
    _hold([h], tensor)
    return h


def barrier_async(name: Optional[str] = None, process_set=None) -> int:
    ps = _set_id(process_set)
    return _core.enqueue_barrier(auto_name("barrier", name, ps), process_set=ps)


def join_async(name: Optional[str] = None, process_set=None) -> int:
    """This rank has no more data: it contributes zeros to others' all-reduces until all join."""
    ps = _set_id(process_set)
    return _core.enqueue_join(auto_name("join", name, ps), process_set=ps)


def poll(handle: int) -> bool:
    """True once the operation behind ``handle`` has finished (successfully or not)."""
    return _core.poll(integer_arg(handle, "handle"))


def wait(handle: int) -> Result:
    """Block until ``handle`` finishes; return its Result or raise its error. Frees the handle."""
    try:
        output, is_bf16, splits, last_rank = _core.wait(integer_arg(handle, "handle"))
    finally:
        with _refs_lock:
            _inflight_refs.pop(handle, None)
    return Result(output, bool(is_bf16), splits, last_rank)


def wait_all(handles: Sequence[int]) -> List[Result]:
    """Wait for every handle (so none is left pending), then raise the first error, if any."""
    results, error = [], None
    for h in handles:
        try:
            results.append(wait(h))
        except Exception as e:  # noqa: BLE001 - re-raised below, after the rest are freed
            results.append(None)
            if error is None:
                error = e
    if error is not None:
        raise error
    return results
