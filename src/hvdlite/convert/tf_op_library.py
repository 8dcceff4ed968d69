"""Where the build puts the TensorFlow op library (csrc/frameworks/tensorflow/check_status_op.c),
without importing TensorFlow: for the op's loader (tf_check_status.py) and --check-build."""

import os

LIBRARY = "_tf_check_status.so"


def library_paths():
    """Where the build installs the library: beside ``_core`` (in site-packages for an
    editable install), then in the package folder."""
    from hvdlite import _core
    import hvdlite
    dirs = [os.path.dirname(_core.__file__), os.path.dirname(hvdlite.__file__)]
    return [os.path.join(d, LIBRARY) for d in dict.fromkeys(dirs)]
