"""A c10d group's calls: named in call order, their errors naming them, their timeouts.

Note [c10d names]
A c10d collective has no name, while hvdlite's engine matches requests across ranks by name.
Every rank issues a group's collectives in the same order (c10d requires it, as gloo does),
so the n-th collective of group ``g`` is named ``c10d.g.n`` (its members ``c10d.g.n.i``).
Ranks that disagree on the n-th call (shape, dtype, op, root) get the engine's mismatch error
for that name, and the error says which c10d call it was. After an error every member of the
group's process set got (a mismatch, a deadlock), the numbering starts over as hvdlite's own
unnamed calls do (Note [unnamed names after a failure] in src/hvdlite/policy/names.py): the
n-th call from then on is ``c10d.g.r<round>.n`` on every rank.

Note [group timeouts]
As gloo's, a group's timeout bounds every wait for one of its collectives (blocking calls, and
Work.wait() without a timeout of its own): past it the caller gets an error instead of waiting
forever for ranks that never submit the call. The request stays in flight in the engine, and
completes if they do submit it later.
"""

import datetime

from hvdlite.exceptions import HvdliteError, HvdliteUnsupportedError
from hvdlite.policy.names import call_number, kept_counters
from hvdlite.policy.reduce_ops import Average, Max, Min, Product, Sum

#: c10d's reduce ops, by their enum names, as the core's
REDUCE_OPS = {"SUM": Sum, "AVG": Average, "MIN": Min, "MAX": Max, "PRODUCT": Product}


class CallOrder:
    """The calls of one group, numbered in the order this rank issues them; ``process_set``:
    the id of the group's process set."""

    def __init__(self, label, process_set=0):
        self.label = label
        self._key = f"c10d.{label}"
        self._set = process_set
        self._counters = kept_counters()

    def next(self, kind):
        """(the engine's name for the next call, the call as errors name it)."""
        seq = call_number(self._key, self._set, self._counters)
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
