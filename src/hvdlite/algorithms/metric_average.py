"""Metrics averaged over ranks (``MetricAverageCallback``): every number in a dict of logged
metrics goes to the core as one float64 vector, and comes back as the average."""

import numpy as np

from hvdlite import ops as _ops
from hvdlite.policy import Average


def is_number(value) -> bool:
    """Whether ``value`` is one number (a Python or numpy scalar, or a one-element array)."""
    try:
        return np.asarray(value).size == 1 and np.asarray(value).dtype.kind in "biuf"
    except Exception:  # noqa: BLE001 - anything numpy cannot read is no number
        return False


def average_in_place(logs, name="MetricAverageCallback"):
    """Replace every number in ``logs`` by its average over ranks (floats); every rank must
    log the same names. A collective."""
    if not logs:
        return
    keys = sorted(k for k, v in logs.items() if is_number(v))
    values = np.array([np.asarray(logs[k]).item() for k in keys], dtype=np.float64)
    out = np.empty_like(values)
    _ops.wait(_ops.grouped_allreduce_async([values], [out], [name], Average))
    for k, v in zip(keys, out.tolist()):
        logs[k] = v
