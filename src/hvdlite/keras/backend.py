"""Which Keras backend hvdlite serves, and the bridge that moves that backend's tensors.

Keras 3 picks its backend once per process (``KERAS_BACKEND`` or ``~/.keras/keras.json``);
``hvdlite.keras`` reads it at import. Everything Keras-level (the optimizer wrapper, the
callbacks) is written once in this package against a *bridge*: a module in
``src/hvdlite/keras/bridges/`` that all-reduces, all-gathers and broadcasts the backend's own
tensors, eagerly and inside the backend's compiled train step, and runs one of two
variable-updating branches on a tensor predicate.
"""

import importlib

import keras

from hvdlite.exceptions import HvdliteInvalidArgumentError

#: Keras backends hvdlite can serve, each with its bridge module in src/hvdlite/keras/bridges/.
SUPPORTED_BACKENDS = ("tensorflow", "torch", "jax")

BACKEND = keras.backend.backend()

_bridge = None


def check_supported(backend=BACKEND):
    """Raise a clear error unless hvdlite can serve Keras' backend."""
    if backend not in SUPPORTED_BACKENDS:
        raise HvdliteInvalidArgumentError(
            f"hvdlite.keras cannot serve the Keras backend '{backend}' (KERAS_BACKEND); "
            f"supported backends: {', '.join(SUPPORTED_BACKENDS)}. Set KERAS_BACKEND to "
            f"one of them before keras is imported.")


def bridge():
    """The bridge module for Keras' backend (imported on first use)."""
    global _bridge
    if _bridge is None:
        check_supported()
        _bridge = importlib.import_module(f"hvdlite.keras.bridges.{BACKEND}")
    return _bridge
