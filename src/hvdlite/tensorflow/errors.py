"""hvdlite's errors as TensorFlow sees them (each both the hvdlite error and its
``tf.errors`` class): defined in :mod:`hvdlite.convert.tf_errors`, which the Keras
TensorFlow bridge shares."""

from hvdlite.convert.tf_errors import (HvdliteDeadlockError, HvdliteInternalError,  # noqa: F401
                                       HvdliteInvalidArgumentError, HvdliteMismatchError,
                                       HvdliteNotInitializedError, HvdliteOutOfMemoryError,
                                       HvdliteRanksLostError, HvdliteShutdownError,
                                       HvdliteTimeoutError, HvdliteUnsupportedError, native,
                                       recoverable)
