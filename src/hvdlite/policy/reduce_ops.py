"""Reduce ops (Horovod's numbering) and the rules on them, written once for every adapter:
how ``op=`` / ``average=`` resolve, which ops an algorithm accepts, and
``gradient_predivide_factor`` as (op, prescale, postscale)."""

import operator
import warnings
from typing import Tuple

from hvdlite import _core
from hvdlite.exceptions import HvdliteInvalidArgumentError, HvdliteUnsupportedError
from hvdlite.process_sets import set_size

# Reduce ops, numbered as in Horovod so scripts that compare them keep working.
Average = 0
Sum = 1
Adasum = 2
Min = 3
Max = 4
Product = 5

REDUCE_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max",
                   Product: "Product"}


_CORE_OPS = frozenset((Average, Sum, Min, Max, Product))  # the element-wise ops the core runs


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
    if op not in REDUCE_OP_NAMES:
        raise HvdliteInvalidArgumentError(f"{what}: unknown reduce op {op!r}; use Average, "
                                          f"Sum, Adasum, Min, Max or Product")
    return int(op)


def check_adasum_ranks(op: int, set_id: int, what: str = "allreduce") -> None:
    """Horovod's rule for Adasum: a power-of-two number of ranks (in the process set it runs
    on; ``set_id`` 0 is the job). Raised on every rank alike, before anything is sent, so
    the job goes on. (The core's coordinator refuses the same, for callers of ``_core``.)"""
    if op != Adasum:
        return
    size = _core.process_set_size(set_id) if set_id else _core.size()
    if size & (size - 1):
        where = "the job" if not set_id else f"process set {set_id}"
        raise HvdliteUnsupportedError(
            f"{what}: op=Adasum needs a power-of-two number of ranks (as in Horovod), but "
            f"{where} has {size}")


def require_average_or_sum(op: int, what: str, why: str = "",
                           error=HvdliteInvalidArgumentError) -> None:
    """The one check that an option reduces with Average or Sum only (sharding, sparse
    gradients, stateful compression): others cannot be computed the way it reduces.
    ``error``: the adapter's own class (TensorFlow's errors are also tf.errors)."""
    if op not in (Average, Sum):
        raise error(f"{what}: op must be Average or Sum, not {REDUCE_OP_NAMES.get(op, op)}"
                    + (f" ({why})" if why else ""))


def gathered_rows_divisor(op: int, set_size: int, what: str, why: str,
                          error=HvdliteInvalidArgumentError) -> int:
    """Horovod's sparse all-reduce all-gathers every rank's rows: Sum keeps them, Average
    divides the values by the set's size (the divisor returned); other ops cannot be
    computed that way and raise ``error`` (see :func:`require_average_or_sum`)."""
    require_average_or_sum(op, what, why, error)
    return set_size if op == Average else 1


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


def reduction(op: int, factor: float, process_set=None) -> Tuple[int, float, float]:
    """:func:`predivide` over the ranks of ``process_set`` (None: all ranks)."""
    return predivide(op, factor, set_size(process_set))
