"""Every policy the adapters share, written once and free of any framework.

The numpy, torch and TensorFlow adapters convert tensors and glue autograd; what a call
*means* is decided here:

- reduce ops (Horovod's numbering) and how ``op=`` / ``average=`` resolve;
- ``gradient_predivide_factor`` as (op, prescale, postscale);
- which compression the C++ core applies on the wire and which runs in Python;
- names: generated names in call order, and the members of a grouped call;
- the dtypes the core moves (its own table, ``_core.supported_dtypes()``);
- the gradient of every collective (``GRADIENTS``), read by both autograd glues.
"""

import itertools
import operator
import threading
import warnings
from typing import Callable, List, NamedTuple, Optional, Tuple

from . import _core
from .exceptions import HvdliteInvalidArgumentError, HvdliteUnsupportedError

# Reduce ops, numbered as in Horovod so scripts that compare them keep working.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

REDUCE_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max",
                   Product: "Product"}


_CORE_OPS = frozenset((Average, Sum, Min, Max, Product))  # the ops the core runs


def integer_arg(value, what: str, low: int = -2**63, high: int = 2**63 - 1) -> int:
    """The one check for every integer parameter (root_rank, splits, op, ...).

    Python and numpy integers pass (so do integer scalar tensors, through ``__index__``);
    bools, floats, strings and out-of-range values raise HvdliteInvalidArgumentError, never
    a truncation or a generic TypeError.
    """
    if isinstance(value, bool):
        raise HvdliteInvalidArgumentError(f"{what} must be an integer, got the bool {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise HvdliteInvalidArgumentError(f"{what} must be an integer, got {value!r} "
                                          f"({type(value).__name__})") from None
    if not low <= v <= high:
        raise HvdliteInvalidArgumentError(f"{what} {v} is out of range [{low}, {high}]")
    return v


def resolve_op(op=None, average=None, what: str = "allreduce") -> int:
    """Horovod's ``op=`` / deprecated ``average=`` rules; returns a reduce op the core runs."""
    if average is None and op.__class__ is int and op in _CORE_OPS:  # the common case, first
        return op
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if average is not None:
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed",
                      DeprecationWarning, stacklevel=3)
        op = Average if average else Sum
    if op is None:
        op = Average
    op = integer_arg(op, f"{what}: op")
    if op == Adasum:
        raise HvdliteUnsupportedError(f"{what}: op=Adasum is not supported by hvdlite; use "
                                      f"Average or Sum")
    if op not in REDUCE_OP_NAMES:
        raise HvdliteInvalidArgumentError(f"{what}: unknown reduce op {op!r}; use Average, "
                                          f"Sum, Min, Max or Product")
    return int(op)


def check_predivide(op: int, factor: float, what: str) -> None:
    if factor != 1.0 and op != Average:
        raise ValueError(f"{what}: gradient_predivide_factor not supported with op != Average")
    if factor <= 0:
        raise ValueError(f"{what}: gradient_predivide_factor must be > 0")


def predivide(op: int, factor: float, size: int) -> Tuple[int, float, float]:
    """(op, prescale, postscale) for ``gradient_predivide_factor`` f: with Average, scale by
    1/f before the sum and by f/size after it (as Horovod)."""
    if op == Average and factor != 1.0:
        return Sum, 1.0 / factor, factor / size
    return op, 1.0, 1.0


# ---------------------------------------------------------------------------- dtypes

#: Names of the dtypes the core moves, from the core's own table.
SUPPORTED_DTYPES: Tuple[str, ...] = tuple(_core.supported_dtypes())
_SUPPORTED = frozenset(SUPPORTED_DTYPES)
#: dtypes the core packs as 16-bit floats on the wire (Compression.fp16 / .bf16).
WIRE_PACKABLE = frozenset(("float32", "float64"))
FLOATING = frozenset(("float16", "bfloat16", "float32", "float64"))


def check_dtype(dtype_name: str, what: str, label: str) -> None:
    """Raise naming the tensor unless the core moves ``dtype_name``."""
    if dtype_name not in _SUPPORTED:
        raise HvdliteInvalidArgumentError(
            f"{what}: {label} has dtype {dtype_name}, which hvdlite does not support "
            f"(supported: {', '.join(SUPPORTED_DTYPES)})")


# ------------------------------------------------------------------------ compression

# Wire codes of the core (float32/float64 travel as 16-bit floats).
_WIRE_CODES = {None: 0, "none": 0, "fp16": 1, "float16": 1, "bf16": 2, "bfloat16": 2}


def wire_code(wire) -> int:
    """The core's code for a wire format name (or a compressor carrying ``wire_dtype``)."""
    key = getattr(wire, "wire_dtype", wire)
    if key not in _WIRE_CODES:
        raise HvdliteInvalidArgumentError(
            f"unknown compression {wire!r}; use None, 'fp16' or 'bf16'")
    return _WIRE_CODES[key]


def wire_format(compression, dtype_name: str) -> Tuple[Optional[str], bool]:
    """(wire format the core applies or None, whether compress/decompress run in Python).

    The built-in 16-bit compressors (and the strings 'fp16'/'bf16') are handed to the core
    for float32/float64 and leave non-floating tensors alone; any other compressor runs in
    Python.
    """
    if compression is None or getattr(compression, "is_identity", False):
        return None, False
    wire = compression if isinstance(compression, str) else getattr(compression, "wire_dtype", None)
    if wire is not None:
        if dtype_name in WIRE_PACKABLE:
            return wire, False
        if dtype_name not in FLOATING or isinstance(compression, str):
            return None, False
    return None, True


# -------------------------------------------------------------------------- names

_name_counters = {}
_counter_lock = threading.Lock()


def auto_name(kind: str, name: Optional[str] = None, process_set: int = 0,
              counters: Optional[dict] = None) -> str:
    """``name``, or a generated one: ranks that call ops in the same order get equal names.

    Counted per process set: the members of a set agree on its order only. ``counters``:
    where to count instead of the job-wide counters (TensorFlow counts per graph).
    """
    if name is not None:
        return valid_name(name)
    with _counter_lock:
        counters = _name_counters if counters is None else counters
        counter = counters.setdefault((kind, process_set), itertools.count())
        return f"{kind}.noname.{next(counter)}"


def reset_name_counters() -> None:
    """init() calls this so that a re-initialised job starts its generated names afresh."""
    with _counter_lock:
        _name_counters.clear()


def valid_name(name) -> str:
    """``str(name)``, refused by name when the core cannot take it: not valid UTF-8 (a lone
    surrogate, as ``os.fsdecode`` makes of undecodable bytes)."""
    name = str(name)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise HvdliteInvalidArgumentError(
            f"the name {name!r} is not valid UTF-8 ({e.reason} at index {e.start}); collective "
            "names must be valid UTF-8") from None
    return name


def group_names(base: Optional[str], n: int) -> Optional[List[str]]:
    """Names of the members of a grouped call: ``base.i``; None (the collective generates
    names, counted in its process set) when there is no base name."""
    if base is None:
        return None
    return [f"{base}.{i}" for i in range(n)]


# ------------------------------------------------------------------------ gradients

class GradRule(NamedTuple):
    """The gradient of a collective, as Horovod defines it.

    ``collective`` is run on the incoming gradient with ``op(forward op)`` (for
    all-reduces), after multiplying it by ``scale(op, prescale, postscale, size)``;
    ``keep`` says what this rank keeps of the result: "all", "own_rows" (the rows this
    rank contributed) or "root" (the root gets it, others zeros). ``same_scales``: the
    backward all-reduce takes the forward's prescale/postscale factors.
    """
    collective: str
    op: Callable[[int], int]
    scale: Callable[[int, float, float, int], float]
    keep: str
    same_scales: bool = False


def _same(op):
    return op


def _average(_op):
    return Average


def _unscaled(_op, _pre, _post, _size):
    return 1.0


def _reducescatter_scale(op, pre, post, size):
    return pre * post * (size if op == Sum else 1)


GRADIENTS = {
    # the same all-reduce; the scale factors travel as pre/post of that all-reduce
    "allreduce": GradRule("allreduce", _same, _unscaled, "all", same_scales=True),
    "allgather": GradRule("allreduce", _average, _unscaled, "own_rows"),
    "broadcast": GradRule("allreduce", _average, _unscaled, "root"),
    "alltoall": GradRule("alltoall", _same, _unscaled, "all"),
    "reducescatter": GradRule("allgather", _same, _reducescatter_scale, "all"),
}


def gradient_scale(kind: str, op: int, prescale: float, postscale: float, size: int) -> float:
    return GRADIENTS[kind].scale(op, prescale, postscale, size)


def own_rows(first_dims: List[int], rank: int) -> Tuple[int, int]:
    """(offset, rows) of ``rank``'s block in a tensor all-gathered from ``first_dims``."""
    return sum(first_dims[:rank]), first_dims[rank]


def reducescatter_rows(rows: int, size: int, rank: int) -> int:
    """Rows rank ``rank`` receives from a reduce-scatter of ``rows`` rows (as the core)."""
    return rows // size + (1 if rank < rows % size else 0)
