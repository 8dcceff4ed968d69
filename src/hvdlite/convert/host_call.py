"""The host side of every Keras bridge's ``host_call`` (see src/hvdlite/keras/bridges/), free of
any framework: the function runs on writable numpy copies of its arguments, and its results
come back with the shapes and dtypes the bridge promised the compiled step. Each bridge wraps
it in its own crossing: a JAX host callback, a ``tf.numpy_function``, a direct call on torch.
"""

import numpy as np


def on_host(fn, out_specs):
    """``host(run, *arrays)``: ``fn(bool(run), *copies of arrays)``, its results as numpy
    arrays shaped as ``out_specs`` ((shape, numpy dtype) pairs)."""
    def host(run, *arrays):
        out = fn(bool(run), *[np.array(a, copy=True) for a in arrays])
        return [np.asarray(o, dtype=d).reshape(s) for o, (s, d) in zip(out, out_specs)]
    return host
