"""A c10d group's calls: named in call order, their errors naming them, their timeouts.

Note [c10d names]
A c10d collective has no name, while hvdlite's engine matches requests across ranks by name.
Every rank issues a group's collectives in the same order (c10d requires it, as gloo does),
so the n-th collective of group ``g`` is named ``c10d.g.n`` (its members ``c10d.g.n.i``).
Ranks that disagree on the n-th call (shape, dtype, op, root) get the engine's mismatch error
for that name, and the error says which c10d call it was.

Note [group timeouts]
As gloo's, a group's timeout bounds every wait for one of its collectives (blocking calls, and
Work.wait() without a timeout of its own): past it the caller gets an error instead of waiting
forever for ranks that never submit the call. The request stays in flight in the engine, and
completes if they do submit it later.
"""

import datetime
import itertools

from hvdlite.exceptions import HvdliteError, HvdliteUnsupportedError
from hvdlite.policy.reduce_ops import Average, Max, Min, Product, Sum

#: c10d's reduce ops, by their enum names, as the core's
REDUCE_OPS = {"SUM": Sum, "AVG": Average, "MIN": Min, "MAX": Max, "PRODUCT": Product}


class CallOrder:
    """The calls of one group, numbered in the order this rank issues them."""

    def __init__(self, label):
        self.label = label
        self._count = itertools.count()   # next() is atomic under the GIL

    def next(self, kind):
        """(the engine's name for the next call, the call as errors name it)."""
        seq = next(self._count)
        return f"c10d.{self.label}.{seq}", f"{kind} (call {seq} of group {self.label!r})"


def members(name, n):
    """The names of a call's ``n`` requests: the call's own for one."""
    return [name] if n == 1 else [f"{name}.{i}" for i in range(n)]


def named_error(error, what):
    """``error`` with the c10d call named first (same type where it can be), no traceback."""
    try:
        named = type(error)(f"{what}: {error}")
    except Exception:  # noqa: BLE001 - a type that takes other arguments
        named = HvdliteError(f"{what}: {error}")
    return named.with_traceback(None)


def reduce_op(op, what):
    """The core's reduce op for c10d's ``op`` (an enum value, shown as ``RedOpType.SUM``)."""
    name = str(op).rpartition(".")[2]
    if name not in REDUCE_OPS:
        raise HvdliteUnsupportedError(f"{what}: reduce op {op} is not supported by the hvdlite "
                                      f"backend (supported: {', '.join(REDUCE_OPS)})")
    return REDUCE_OPS[name]


def seconds(timeout):
    """Seconds of a c10d timeout (a timedelta or a number); None where it is unset (c10d's
    kUnsetTimeout is -1 ms), zero or None."""
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    return float(timeout) if timeout is not None and timeout > 0 else None


def timed_out(error_type, what, limit):
    """``error_type`` (the adapter's timeout error) for ``what`` outliving ``limit`` seconds."""
    return error_type(
        f"{what}: Timed out waiting {round(limit * 1000)}ms (the group's timeout) for the "
        f"other ranks to submit it; the request is still in flight and completes if they do")
