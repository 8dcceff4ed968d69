"""The JAX bridge. Keras' JAX trainer jit-compiles the whole train step, so gradients are
tracers there: they reach the core through a host callback, which XLA runs with numpy
views of the values. The callback enqueues one grouped request on the core and waits for
it (the core drops the GIL while waiting). Request names are fixed when the step is
traced, so every rank that traces the same model agrees on them. Concrete (eager) arrays
are handed to the core directly, without a callback.

Which callback: a collective blocks until every rank has submitted it, so ranks must
submit blocking collectives in the same order. ``io_callback(ordered=True)`` keeps program
order and serves the collectives a user calls inside ``jax.jit``. A train step makes
exactly one (the grouped gradients, whose result the update consumes), so there is no
order to keep and it uses ``jax.pure_callback``, which costs about a third as much per
call (~0.5 ms against ~1.5-2 ms on the 2-core development machine).

The core never sees JAX: it gets numpy arrays. Host callbacks are not differentiable, so
these collectives have no gradients.
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import io_callback

from hvdlite import _core
from hvdlite import ops as _ops
from hvdlite.algorithms.compression import cast_compressors
from hvdlite.exceptions import HvdliteError, HvdliteInvalidArgumentError, raise_replaced

from ..labels import (process_set_kwargs, reduction, set_size,
                      variable_label, wire_format, with_labels)

Compression, FP16Compressor, BF16Compressor = cast_compressors(
    cast=lambda tensor, dtype: tensor.astype(dtype),
    is_floating=lambda dtype: jnp.issubdtype(dtype, jnp.floating),
    float16=np.dtype("float16"), bfloat16=np.dtype(jnp.bfloat16))

#: dtypes the core moves, from its own table (JAX makes float64/int64 only with
#: jax_enable_x64).
SUPPORTED_DTYPES = tuple(np.dtype(jnp.bfloat16) if name == "bfloat16" else np.dtype(name)
                         for name in _core.supported_dtypes())


def _check_dtype(x, what, label):
    if np.dtype(x.dtype) not in SUPPORTED_DTYPES:
        raise HvdliteInvalidArgumentError(
            f"hvdlite.keras {what}: {label} has dtype {np.dtype(x.dtype).name}, which hvdlite "
            f"does not support (supported: {', '.join(d.name for d in SUPPORTED_DTYPES)})")


def _relabel(e, labels):
    raise_replaced(e, with_labels(e, labels) if labels else e)


def _traced(*xs):
    return any(isinstance(x, jax.core.Tracer) for x in xs)


def _call_host(host, shapes, *args, ordered):
    """Run ``host`` on numpy views of ``args``: directly for concrete arrays, else from
    the compiled function (see the module docstring for which callback)."""
    if not _traced(*args):
        out = host(*[np.asarray(a) for a in args])
        return [jnp.asarray(o) for o in out] if isinstance(out, list) else jnp.asarray(out)
    if ordered:
        return io_callback(host, shapes, *args, ordered=True)
    return jax.pure_callback(host, shapes, *args)


def _grouped_allreduce(xs, names, op, prescale, postscale, compression, process_set,
                       labels=None, when=None, ordered=True):
    """All-reduce jax arrays (traced or not) as one request group; ``when`` (a boolean
    array) skips the collective where false, returning ``xs`` unchanged."""
    routes = [wire_format(compression, np.dtype(x.dtype).name) for x in xs]
    wire = next((w for w, _ in routes if w is not None), None)
    ctxs = [None] * len(xs)
    send = list(xs)
    for k, (_, in_python) in enumerate(routes):
        if in_python:
            send[k], ctxs[k] = compression.compress(xs[k])
    ps = process_set_kwargs(_ops.grouped_allreduce_async, process_set)

    def host(run, *arrays):
        arrays = [np.asarray(a) for a in arrays]
        if not bool(run):
            return arrays
        outs = [np.empty_like(a) for a in arrays]
        try:
            _ops.wait_all(_ops.grouped_allreduce_async(arrays, outs, names, op, prescale,
                                                       postscale, wire, **ps))
        except HvdliteError as e:
            _relabel(e, labels)
        return outs

    shapes = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x in send]
    run = np.bool_(True) if when is None else when
    out = _call_host(host, shapes, run, *send, ordered=ordered)
    return [o if not in_python else compression.decompress(o, ctx)
            for o, (_, in_python), ctx in zip(out, routes, ctxs)]


def gradient_reducer(name, op, predivide, compression, sparse_as_dense, process_set, what):
    def reduce(grads, variables, when=None):
        grads = list(grads)
        present = [i for i, g in enumerate(grads) if g is not None]
        if not present:
            return grads
        true_op, prescale, postscale = reduction(op, predivide, process_set)
        names = [f"{name}.{i}" for i in present]
        labels = {n: variable_label(variables[i], i) for n, i in zip(names, present)}
        xs = [jnp.asarray(grads[i]) for i in present]
        for n, x in zip(names, xs):
            _check_dtype(x, what, f"the gradient of {labels[n]} ('{n}')")
        reduced = _grouped_allreduce(xs, names, true_op, prescale, postscale, compression,
                                     process_set, labels, when, ordered=False)
        for i, r in zip(present, reduced):
            grads[i] = r
        return grads

    return reduce


def host_call(fn, args, out_specs, when=None):
    """See hvdlite.keras.bridges: one host callback (the result feeds the update, so there
    is no order to keep, as for the gradients)."""
    def host(run, *arrays):
        out = fn(bool(run), *[np.array(a, copy=True) for a in arrays])
        return [np.asarray(o, dtype=d).reshape(s) for o, (s, d) in zip(out, out_specs)]

    shapes = [jax.ShapeDtypeStruct(tuple(s), d) for s, d in out_specs]
    run = np.bool_(True) if when is None else when
    return list(_call_host(host, shapes, run, *[jnp.asarray(a) for a in args], ordered=False))


def dense_gradient(g, label, sparse_as_dense, what):
    return g


def cond(pred, true_fn, false_fn, variables):
    """Run the variable updates of ``true_fn`` where ``pred`` holds, else ``false_fn``'s.

    Under a trace (Keras' stateless train step) a branch may not assign variables inside
    ``lax.cond``, so both run on the same starting values and each variable takes the
    selected result, as Keras' own JAX optimizer does for gradient accumulation. The
    collectives in ``true_fn`` must carry ``when=pred`` so that only one branch talks.
    """
    if not _traced(pred):
        return true_fn() if bool(pred) else false_fn()
    variables = list(variables)
    start = [v.value for v in variables]
    true_fn()
    taken = [v.value for v in variables]
    for v, s in zip(variables, start):
        v.assign(s)
    false_fn()
    for v, t in zip(variables, taken):
        v.assign(jnp.where(pred, t, v.value))
    return None


def _name(kind, name):
    """Names are fixed at trace time; unnamed calls are numbered in call order."""
    return _ops.auto_name(f"jax.{kind}", name)


def allreduce(value, name, op, prescale_factor, postscale_factor, compression, process_set):
    x = jnp.asarray(value)
    _check_dtype(x, "allreduce", f"'{name}'" if name else "the tensor")
    return _grouped_allreduce([x], [_name("allreduce", name)], op, prescale_factor,
                              postscale_factor, compression, process_set)[0]


def allgather(value, name, process_set):
    """Concatenate every rank's rows. Eagerly the ranks' first dimensions may differ;
    inside jit the output shape must be known at trace time, so they must be equal."""
    x = jnp.asarray(value)
    _check_dtype(x, "allgather", f"'{name}'" if name else "the tensor")
    x = x.reshape(1) if x.ndim == 0 else x
    rname = _name("allgather", name)
    ps = process_set_kwargs(_ops.allgather_async, process_set)
    if not _traced(x):
        res = _ops.wait(_ops.allgather_async(np.asarray(x), name=rname, **ps))
        return jnp.asarray(res.output.view(jnp.bfloat16) if res.bfloat16 else res.output)
    shape = (x.shape[0] * set_size(process_set),) + tuple(x.shape[1:])

    def host(array):
        res = _ops.wait(_ops.allgather_async(np.asarray(array), name=rname, **ps))
        out = res.output.view(jnp.bfloat16) if res.bfloat16 else res.output
        if out.shape != shape:
            raise HvdliteInvalidArgumentError(
                f"hvdlite.keras allgather '{rname}' inside jax.jit: the ranks' first "
                f"dimensions differ (gathered {out.shape[0]} rows, expected {shape[0]} = "
                f"{x.shape[0]} per rank); inside jit every rank must pass the same shape")
        return out
    return _call_host(host, jax.ShapeDtypeStruct(shape, x.dtype), x, ordered=True)


def broadcast(value, root_rank, name, process_set):
    x = jnp.asarray(value)
    _check_dtype(x, "broadcast", f"'{name}'" if name else "the tensor")
    rname = _name("broadcast", name)
    ps = process_set_kwargs(_ops.broadcast_async, process_set)

    def host(array):
        array = np.asarray(array)
        out = np.empty_like(array)
        _ops.wait(_ops.broadcast_async(array, int(root_rank), output=out, name=rname, **ps))
        return out
    return _call_host(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x, ordered=True)


def broadcast_variables(variables, root_rank, name, process_set):
    """Assign ``root_rank``'s values to Keras variables (eagerly, as callbacks run)."""
    variables = list(variables)
    base = _ops.auto_name("broadcast_variables", name)
    values = [np.asarray(v.value) for v in variables]
    for i, (v, a) in enumerate(zip(variables, values)):
        _check_dtype(a, "broadcast_variables", variable_label(v, i))
    outs = [np.empty_like(a) for a in values]
    ps = process_set_kwargs(_ops.broadcast_async, process_set)
    _ops.wait_all([_ops.broadcast_async(a, int(root_rank), output=o, name=f"{base}.{i}", **ps)
                   for i, (a, o) in enumerate(zip(values, outs))])
    for v, o in zip(variables, outs):
        v.assign(o)
