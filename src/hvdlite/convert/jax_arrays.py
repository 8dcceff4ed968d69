"""JAX arrays in and out of the core, for the Keras JAX bridge: the dtypes the core moves,
the host callback by which a jitted step reaches the core (``io_callback`` where program
order matters, ``pure_callback`` where it does not: see src/hvdlite/keras/bridges/jax.py), and
the grouped all-reduce on arrays traced or not. The core gets numpy arrays, or for concrete
GPU arrays their DLPack capsules (convert/dlpack_arrays.py), never JAX's."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from hvdlite import _core, ops as _ops, policy
from hvdlite.convert import dlpack_arrays
from hvdlite.algorithms.compression import cast_compressors
from hvdlite.exceptions import HvdliteError, HvdliteInvalidArgumentError, raise_replaced

Compression, FP16Compressor, BF16Compressor = cast_compressors(
    cast=lambda tensor, dtype: tensor.astype(dtype),
    is_floating=lambda dtype: jnp.issubdtype(dtype, jnp.floating),
    float16=np.dtype("float16"), bfloat16=np.dtype(jnp.bfloat16))

#: dtypes the core moves, from its own table (JAX makes float64/int64 only with
#: jax_enable_x64).
SUPPORTED_DTYPES = tuple(np.dtype(jnp.bfloat16) if name == "bfloat16" else np.dtype(name)
                         for name in _core.supported_dtypes())


def check_dtype(x, what, label):
    if np.dtype(x.dtype) not in SUPPORTED_DTYPES:
        raise HvdliteInvalidArgumentError(
            f"hvdlite.keras {what}: {label} has dtype {np.dtype(x.dtype).name}, which hvdlite "
            f"does not support (supported: {', '.join(d.name for d in SUPPORTED_DTYPES)})")


def traced(*xs):
    return any(isinstance(x, jax.core.Tracer) for x in xs)


def call_host(host, shapes, *args, ordered):
    """Run ``host`` on numpy views of ``args``: directly for concrete arrays, else from
    the compiled function (see the module docstring for which callback)."""
    if not traced(*args):
        out = host(*[np.asarray(a) for a in args])
        return [jnp.asarray(o) for o in out] if isinstance(out, list) else jnp.asarray(out)
    if ordered:
        return io_callback(host, shapes, *args, ordered=True)
    return jax.pure_callback(host, shapes, *args)


class GpuArrays(dlpack_arrays.Framework):
    """Concrete GPU arrays through DLPack (Note [DLPack hand-off without a framework
    stream]): ``__dlpack__(stream=)`` makes the core's producer stream wait for each array's
    definition event. An output is a fresh array of zeros on the input's device, which
    only the core writes before the caller gets it."""

    name = "JAX"
    handoff = "stream"

    def empty_like(self, x):
        return jnp.zeros(x.shape, x.dtype, device=next(iter(x.devices())))


GPU_ARRAYS = GpuArrays()


def grouped_allreduce(xs, names, op, prescale, postscale, compression, process_set,
                       labels=None, when=None, ordered=True):
    """All-reduce jax arrays (traced or not) as one request group; ``when`` (a boolean
    array) skips the collective where false, returning ``xs`` unchanged."""
    routes = [policy.wire_format(compression, np.dtype(x.dtype).name) for x in xs]
    wire = next((w for w, _ in routes if w is not None), None)
    ctxs = [None] * len(xs)
    send = list(xs)
    for k, (_, in_python) in enumerate(routes):
        if in_python:
            send[k], ctxs[k] = compression.compress(xs[k])

    def host(run, *arrays):
        arrays = [np.asarray(a) for a in arrays]
        if not bool(run):
            return arrays
        outs = [np.empty_like(a) for a in arrays]
        try:
            _ops.wait_all(_ops.grouped_allreduce_async(arrays, outs, names, op, prescale,
                                                       postscale, wire, process_set))
        except HvdliteError as e:
            raise_replaced(e, policy.with_labels(e, labels))
        return outs

    if when is None and not traced(*send) and dlpack_arrays.on_one_gpu(send):
        # Concrete GPU arrays stay on the device: staged by the core, no host callback.
        try:
            out = dlpack_arrays.grouped_allreduce(GPU_ARRAYS, send, names, op, prescale,
                                                  postscale, wire, process_set)
        except HvdliteError as e:
            raise_replaced(e, policy.with_labels(e, labels))
    else:
        shapes = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in send]
        run = np.bool_(True) if when is None else when
        out = call_host(host, shapes, run, *send, ordered=ordered)
    return [o if not in_python else compression.decompress(o, ctx)
            for o, (_, in_python), ctx in zip(out, routes, ctxs)]
