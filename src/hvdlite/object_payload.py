"""Python objects as uint8 payloads for the object collectives, with pickling failures agreed.

Note [object collectives agree on failure]
A rank whose object cannot be pickled must not raise before sending: the other ranks would
wait for it forever. It sends its error's text in place of the object, with a flag in the
header that travels first (as the payload's length does), so every rank learns of the failure
from the same collectives and raises HvdliteInvalidArgumentError naming each failed rank and
its error; the failed rank's own exception is chained to it.
"""
from typing import List, Optional, Tuple

import numpy as np

from .exceptions import HvdliteInvalidArgumentError


def pickled(obj, pickler) -> Tuple[np.ndarray, Optional[Exception]]:
    """(obj pickled as uint8, None), or (the error's text as uint8, the error) if it fails."""
    try:
        return np.frombuffer(pickler.dumps(obj), dtype=np.uint8), None
    except Exception as error:  # anything pickling raises: every rank must hear of it
        text = f"{type(error).__name__}: {error}"
        return np.frombuffer(text.encode("utf-8", "backslashreplace"), dtype=np.uint8), error


def header(rank: int, payload: np.ndarray, error: Optional[Exception]) -> np.ndarray:
    """What a rank tells the others before its payload: [bytes, failed, global rank]."""
    return np.array([payload.size, error is not None, rank], dtype=np.int64)


def raise_if_any_failed(what: str, headers: np.ndarray, payloads: List[np.ndarray],
                        error: Optional[Exception]) -> None:
    """headers: one header() row per sender, payloads: what each sent. Raises on every rank
    when some sender failed to pickle; `error`: this rank's own, chained when it failed."""
    failed = [f"rank {int(h[2])} could not pickle its object ({p.tobytes().decode('utf-8', 'replace')})"
              for h, p in zip(headers, payloads) if h[1]]
    if failed:
        raise HvdliteInvalidArgumentError(f"{what}: " + "; ".join(failed)) from error
