"""Check helpers shared by the framework workers (tf_common, keras_common): each check is
counted, and a failed one raises, which ends the whole job through the worker's excepthook."""
import os
import sys

import numpy as np

_checks = []
label = ""  # printed before the rank in messages, e.g. the Keras backend


def _who():
    rank = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "?"))
    return f"{label} rank {rank}" if label else f"rank {rank}"


def check(cond, what):
    """Record a check; fail loudly (the excepthook then aborts the whole job)."""
    _checks.append(what)
    if not cond:
        raise AssertionError(f"[{_who()}] {what}")


def named_check(name, cond, detail=""):
    """The GPU workers' form: ``name`` failed, with ``detail``; counted like :func:`check`."""
    check(cond, f"{name} failed {detail}".rstrip())


def count():
    """How many checks this rank made."""
    return len(_checks)


def expect_error(exc_types, fn, must_contain=(), what=""):
    try:
        fn()
    except exc_types as e:
        msg = str(e)
        for s in must_contain:
            check(s in msg, f"{what}: error message {msg!r} should mention {s!r}")
        return msg
    raise AssertionError(f"{what}: expected {exc_types} but nothing was raised")


def rel_err(a, b):
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def done(name, rank):
    where = f"{label} rank {rank}" if label else f"rank {rank}"
    print(f"{name}: {where} OK ({len(_checks)} checks)", flush=True)
    sys.stdout.flush()
