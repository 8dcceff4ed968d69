"""The HvdliteCheckStatus op: how a collective that fails inside a TensorFlow graph keeps its
``tf.errors`` class (Note [error classes in TensorFlow graphs] in
csrc/frameworks/tensorflow/check_status_op.c).

TensorFlow's ``tf.numpy_function`` turns most Python exceptions into UnknownError. So in a
graph a crossing's numpy function does not raise an hvdlite error: :func:`reporting` makes it
return placeholder outputs, the error's TF code and its message, and :func:`checked` puts
the op after it, which fails with that code and message or passes the outputs through.
"""

import os
import threading
import warnings

import numpy as np
import tensorflow as tf

from hvdlite.convert.tf_op_library import library_paths
from hvdlite.exceptions import HvdliteError

_OK = np.int32(0)
_NO_MESSAGE = np.zeros(0, dtype=np.uint8)

_lock = threading.Lock()
_module = []   # [] until loaded once; then [the op module] or [None] if it could not be


def op_module():
    """The loaded op library, or None where it cannot be loaded (then graph errors stay
    UnknownError, with hvdlite's message). Loaded once, the first time it is asked for."""
    with _lock:
        if not _module:
            _module.append(_load())
        return _module[0]


def _load():
    tried = []
    for path in library_paths():
        if not os.path.exists(path):
            tried.append(f"{path}: missing")
            continue
        try:
            module = tf.load_op_library(path)
        except Exception as e:  # noqa: BLE001 - e.g. a TensorFlow without these C API symbols
            tried.append(f"{path}: {e}")
            continue
        if hasattr(module, "hvdlite_check_status"):
            tf.no_gradient("HvdliteCheckStatus")   # as tf.numpy_function's own op
            return module
        tried.append(f"{path}: registered no HvdliteCheckStatus op")
    warnings.warn("hvdlite.tensorflow: cannot load the HvdliteCheckStatus op ("
                  + "; ".join(tried) + "); a collective that fails inside a graph raises "
                  "tf.errors.UnknownError (with hvdlite's message) instead of its own class",
                  RuntimeWarning, stacklevel=3)
    return None


def reporting(fn, touts, native):
    """``fn`` (returning a list of arrays of dtypes ``touts``) as a numpy function that
    returns ``[*outputs, code, message]``: code 0 and no message, or, when ``fn`` raised an
    hvdlite error, the TF code of ``native(error)``, "<hvdlite class>: <its message>" and
    empty placeholders."""
    def wrapped(*args):
        try:
            outs = fn(*args)
        except HvdliteError as e:
            error = native(e)
            code = (error.error_code if isinstance(error, tf.errors.OpError)
                    else tf.errors.UNKNOWN)
            # The class name says which hvdlite error it was (a deadlock and a shutdown are
            # both AbortedError): in a graph the caller gets the tf.errors class only.
            text = f"{type(e).__name__}: {error}"
            message = np.frombuffer(text.encode("utf-8", "replace"), dtype=np.uint8)
            return [np.zeros(0, dtype=t.as_numpy_dtype) for t in touts] + \
                [np.int32(code), message]
        return list(outs) + [_OK, _NO_MESSAGE]
    return wrapped


def checked(module, results, name):
    """The graph outputs of a :func:`reporting` numpy function, through the op that raises
    its error: ``results`` is ``[*outputs, code, message]``."""
    *outputs, code, message = results
    return list(module.hvdlite_check_status(code, message, outputs, name=name))
