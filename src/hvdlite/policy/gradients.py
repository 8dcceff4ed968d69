"""The gradient of every collective (``GRADIENTS``), as Horovod defines it; read by both
autograd glues (torch's autograd Functions, TensorFlow's custom gradients). And which of a
step's gradients are reduced (:func:`reduce_present`), for every Keras bridge."""

from typing import Callable, List, NamedTuple, Tuple

from .reduce_ops import Average, Sum

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


def reduce_present(grads, reduce):
    """``grads`` (a list) with those that are not None replaced by ``reduce(indices)``, their
    reduced values in order. None (a variable without a gradient this step) stays None, and
    without any gradient ``reduce`` is not called."""
    grads = list(grads)
    present = [i for i, g in enumerate(grads) if g is not None]
    if present:
        for i, r in zip(present, reduce(present)):
            grads[i] = r
    return grads
