"""hvdlite's errors as TensorFlow sees them: each class is both the hvdlite error and the
matching ``tf.errors`` class, as Horovod raises it, so code catching either catches them.

Inside a graph a collective is a ``tf.numpy_function``, whose kernel would turn most of
these into UnknownError; there the error's ``error_code`` and message are handed to the
HvdliteCheckStatus op, which raises the same ``tf.errors`` class (src/hvdlite/convert/
tf_check_status.py; Note [error classes in TensorFlow graphs] in
csrc/frameworks/tensorflow/check_status_op.c).
"""

import tensorflow as tf

from hvdlite import exceptions as _exc


def _both(hvdlite_cls, tf_cls):
    class Error(hvdlite_cls, tf_cls):
        # Error(message), or TensorFlow's (node_def, op, message): autograph re-raises an
        # error met while tracing a tf.function through the latter signature.
        def __init__(self, node_def, op=None, message=None, *payloads):
            if message is None:
                node_def, message = None, node_def
            tf_cls.__init__(self, node_def, op, str(message))
            self.args = (str(message),)

        def __str__(self):
            return self.message

        def __reduce__(self):
            return type(self), self.args

    Error.__name__ = Error.__qualname__ = hvdlite_cls.__name__
    Error.__module__ = __name__
    Error.__doc__ = f"{hvdlite_cls.__doc__}\n\nAlso a ``tf.errors.{tf_cls.__name__}``."
    return Error


HvdliteInvalidArgumentError = _both(_exc.HvdliteInvalidArgumentError, tf.errors.InvalidArgumentError)
HvdliteMismatchError = _both(_exc.HvdliteMismatchError, tf.errors.FailedPreconditionError)
HvdliteNotInitializedError = _both(_exc.HvdliteNotInitializedError,
                                   tf.errors.FailedPreconditionError)
HvdliteShutdownError = _both(_exc.HvdliteShutdownError, tf.errors.AbortedError)
HvdliteInternalError = _both(_exc.HvdliteInternalError, tf.errors.InternalError)
HvdliteOutOfMemoryError = _both(_exc.HvdliteOutOfMemoryError, tf.errors.ResourceExhaustedError)
HvdliteDeadlockError = _both(_exc.HvdliteDeadlockError, tf.errors.AbortedError)
HvdliteTimeoutError = _both(_exc.HvdliteTimeoutError, tf.errors.DeadlineExceededError)


class HvdliteUnsupportedError(_exc.HvdliteUnsupportedError, HvdliteInvalidArgumentError):
    """hvdlite.HvdliteUnsupportedError (so also NotImplementedError) and this module's
    HvdliteInvalidArgumentError (so also tf.errors.InvalidArgumentError)."""

    __init__ = HvdliteInvalidArgumentError.__init__
    __str__ = HvdliteInvalidArgumentError.__str__
    __reduce__ = HvdliteInvalidArgumentError.__reduce__


class HvdliteRanksLostError(_exc.HvdliteRanksLostError, HvdliteInternalError):
    """hvdlite.HvdliteRanksLostError (so elastic.run recovers from it) and this module's
    HvdliteInternalError (so also tf.errors.InternalError)."""

    __init__ = HvdliteInternalError.__init__
    __str__ = HvdliteInternalError.__str__
    __reduce__ = HvdliteInternalError.__reduce__


_NATIVE = {
    _exc.HvdliteInvalidArgumentError: HvdliteInvalidArgumentError,
    _exc.HvdliteUnsupportedError: HvdliteUnsupportedError,
    _exc.HvdliteMismatchError: HvdliteMismatchError,
    _exc.HvdliteNotInitializedError: HvdliteNotInitializedError,
    _exc.HvdliteShutdownError: HvdliteShutdownError,
    _exc.HvdliteInternalError: HvdliteInternalError,
    _exc.HvdliteRanksLostError: HvdliteRanksLostError,
    _exc.HvdliteOutOfMemoryError: HvdliteOutOfMemoryError,
    _exc.HvdliteDeadlockError: HvdliteDeadlockError,
    _exc.HvdliteTimeoutError: HvdliteTimeoutError,
}


def native(error):
    """``error`` (an hvdlite error from the core) as its TensorFlow-flavoured class; other
    exceptions (and subclasses with their own meaning, e.g. NotImplementedError) unchanged."""
    cls = _NATIVE.get(type(error))
    return error if cls is None else cls(str(error))


def recoverable(error):
    """The error elastic training recovers from (:class:`HvdliteRanksLostError` or
    :class:`HvdliteInternalError`) that ``error`` is or, raised by a graph op as a
    ``tf.errors.OpError``, names in its message; None when it is something else."""
    if isinstance(error, _exc.HvdliteInternalError):   # raised eagerly: already the right class
        return error
    text = str(getattr(error, "message", error))
    if "HvdliteRanksLostError" in text:
        return HvdliteRanksLostError(text)
    if "HvdliteInternalError" in text:
        return HvdliteInternalError(text)
    return None
