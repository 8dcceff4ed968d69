"""Which compression the C++ core applies on the wire, and which runs in Python (and how it
runs there, for any framework's tensors)."""

from typing import Optional, Tuple

from hvdlite.exceptions import HvdliteInvalidArgumentError

from .dtypes import FLOATING, WIRE_PACKABLE

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


def compressed(compression, tensors, python_side: bool):
    """(tensors to send, contexts): ``compression.compress`` of each tensor where
    ``python_side`` (as :func:`wire_format` says), else the tensors as they are."""
    if not python_side:
        return list(tensors), [None] * len(tensors)
    pairs = [compression.compress(t) for t in tensors]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def decompressed(compression, outs, ctxs, python_side: bool):
    """The reduced ``outs`` decompressed with the contexts :func:`compressed` gave."""
    if not python_side:
        return outs
    return [compression.decompress(o, c) for o, c in zip(outs, ctxs)]
