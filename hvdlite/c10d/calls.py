"""A c10d group's calls named in call order, and errors that name the call.

Note [c10d names]
A c10d collective has no name, while hvdlite's engine matches requests across ranks by name.
Every rank issues a group's collectives in the same order (c10d requires it, as gloo does),
so the n-th collective of group ``g`` is named ``c10d.g.n`` (its members ``c10d.g.n.i``).
Ranks that disagree on the n-th call (shape, dtype, op, root) get the engine's mismatch error
for that name, and the error says which c10d call it was.
"""

import itertools

from hvdlite.exceptions import HvdliteError, HvdliteUnsupportedError
from hvdlite.policy.reduce_ops import Average, Max, Min, Product, Sum

#: c10d's reduce ops (by their enum names) as the core's
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
    message = f"{what}: {error}"
    try:
        named = type(error)(message)
    except Exception:  # noqa: BLE001 - a type that takes other arguments
        named = HvdliteError(message)
    return named.with_traceback(None)


def reduce_op(op, what):
    """The core's reduce op for c10d's ``op`` (an enum value, shown as ``RedOpType.SUM``)."""
    name = str(op).rpartition(".")[2]
    if name not in REDUCE_OPS:
        raise HvdliteUnsupportedError(
            f"{what}: reduce op {op} is not supported by the hvdlite backend "
            f"(supported: {', '.join(REDUCE_OPS)})")
    return REDUCE_OPS[name]
