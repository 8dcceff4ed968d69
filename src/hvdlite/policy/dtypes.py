"""The dtypes the core moves (its own table, ``_core.supported_dtypes()``) and the check that
names a tensor the core cannot move."""

from typing import Tuple

from hvdlite import _core
from hvdlite.exceptions import HvdliteInvalidArgumentError

#: Names of the dtypes the core moves, from the core's own table.
SUPPORTED_DTYPES: Tuple[str, ...] = tuple(_core.supported_dtypes())
_SUPPORTED = frozenset(SUPPORTED_DTYPES)
#: dtypes the core packs as 16-bit floats on the wire (Compression.fp16 / .bf16).
WIRE_PACKABLE = frozenset(("float32", "float64"))
FLOATING = frozenset(("float16", "bfloat16", "float32", "float64"))


def check_dtype(dtype_name: str, what: str, label: str) -> None:
    """Raise naming the tensor unless the core moves ``dtype_name``."""
    if dtype_name not in _SUPPORTED:
        raise HvdliteInvalidArgumentError(
            f"{what}: {label} has dtype {dtype_name}, which hvdlite does not support "
            f"(supported: {', '.join(SUPPORTED_DTYPES)})")
