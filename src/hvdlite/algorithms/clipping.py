"""Clipping by the global norm of gradients that are sharded over ranks (ZeRO-1): each rank
holds a slice of every gradient, so the norm is reduced over ranks before the coefficient
that every rank applies to its own slice."""

import math

import numpy as np

from hvdlite import ops as _ops
from hvdlite.policy import Max, Sum


def local_part(arrays, norm_type: float) -> float:
    """This rank's part of the norm: the max of |g| (inf norm) or the sum of |g|**p."""
    if norm_type == math.inf:
        return max((float(np.max(np.abs(a))) for a in arrays if a.size), default=0.0)
    return sum(float(np.sum(np.abs(np.asarray(a, np.float64)) ** norm_type)) for a in arrays)


def global_norm(arrays, norm_type, name: str, process_set=None) -> float:
    """The norm of order ``norm_type`` of the gradients whose slices ``arrays`` every rank
    holds: the same on every rank (a collective)."""
    norm_type = float(norm_type)
    inf = norm_type == math.inf
    buf = np.array([local_part(arrays, norm_type)], np.float64)
    kw = {} if process_set is None else {"process_set": process_set}
    _ops.wait(_ops.grouped_allreduce_async(
        [buf], None, [f"{name}.{'max' if inf else 'sum'}"], Max if inf else Sum, **kw))
    return float(buf[0]) if inf else float(buf[0]) ** (1.0 / norm_type)


def clip_coefficient(max_norm, total: float, norm_type, error_if_nonfinite=False) -> float:
    """What to multiply the gradients by so that their norm ``total`` is at most
    ``max_norm`` (``torch.nn.utils.clip_grad_norm_``'s rule)."""
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(f"The total norm of order {float(norm_type)} for gradients is "
                           f"non-finite, so it cannot be clipped.")
    return min(float(max_norm) / (total + 1e-6), 1.0)
