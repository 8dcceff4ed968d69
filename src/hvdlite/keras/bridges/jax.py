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

from hvdlite import ops as _ops, policy
from hvdlite.convert.jax_arrays import (Compression, call_host,  # noqa: F401 - the interface
                                        check_dtype, grouped_allreduce, traced)
from hvdlite.convert.host_call import on_host
from hvdlite.exceptions import HvdliteInvalidArgumentError

from hvdlite.policy import reduction, variable_label
from hvdlite.process_sets import process_set_kwargs, set_size

def gradient_reducer(name, op, predivide, compression, sparse_as_dense, process_set, what):
    def reduce(grads, variables, when=None):
        def reduced(present):
            true_op, prescale, postscale = reduction(op, predivide, process_set)
            names = [f"{name}.{i}" for i in present]
            labels = {n: f"gradient of {variable_label(variables[i], i)}"
                      for n, i in zip(names, present)}
            xs = [jnp.asarray(grads[i]) for i in present]
            for n, x in zip(names, xs):
                check_dtype(x, what, f"the {labels[n]} ('{n}')")
            return grouped_allreduce(xs, names, true_op, prescale, postscale, compression,
                                     process_set, labels, when, ordered=False)
        return policy.reduce_present(grads, reduced)

    return reduce


def host_call(fn, args, out_specs, when=None):
    """See hvdlite.keras.bridges: one host callback (the result feeds the update, so there
    is no order to keep, as for the gradients)."""
    shapes = [jax.ShapeDtypeStruct(tuple(s), d) for s, d in out_specs]
    run = np.bool_(True) if when is None else when
    return list(call_host(on_host(fn, out_specs), shapes, run, *[jnp.asarray(a) for a in args],
                          ordered=False))


def dense_gradient(g, label, sparse_as_dense, what):
    return g


def cond(pred, true_fn, false_fn, variables):
    """Run the variable updates of ``true_fn`` where ``pred`` holds, else ``false_fn``'s.

    Under a trace (Keras' stateless train step) a branch may not assign variables inside
    ``lax.cond``, so both run on the same starting values and each variable takes the
    selected result, as Keras' own JAX optimizer does for gradient accumulation. The
    collectives in ``true_fn`` must carry ``when=pred`` so that only one branch talks.
    """
    if not traced(pred):
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
    check_dtype(x, "allreduce", f"'{name}'" if name else "the tensor")
    return grouped_allreduce([x], [_name("allreduce", name)], op, prescale_factor,
                              postscale_factor, compression, process_set)[0]


def allgather(value, name, process_set):
    """Concatenate every rank's rows. Eagerly the ranks' first dimensions may differ;
    inside jit the output shape must be known at trace time, so they must be equal."""
    x = jnp.asarray(value)
    check_dtype(x, "allgather", f"'{name}'" if name else "the tensor")
    x = x.reshape(1) if x.ndim == 0 else x
    rname = _name("allgather", name)
    ps = process_set_kwargs(_ops.allgather_async, process_set)
    if not traced(x):
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
    return call_host(host, jax.ShapeDtypeStruct(shape, x.dtype), x, ordered=True)


def broadcast(value, root_rank, name, process_set):
    x = jnp.asarray(value)
    check_dtype(x, "broadcast", f"'{name}'" if name else "the tensor")
    rname = _name("broadcast", name)
    ps = process_set_kwargs(_ops.broadcast_async, process_set)

    def host(array):
        array = np.asarray(array)
        out = np.empty_like(array)
        _ops.wait(_ops.broadcast_async(array, int(root_rank), output=out, name=rname, **ps))
        return out
    return call_host(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x, ordered=True)


def broadcast_variables(variables, root_rank, name, process_set):
    """Assign ``root_rank``'s values to Keras variables (eagerly, as callbacks run)."""
    variables = list(variables)
    base = _ops.auto_name("broadcast_variables", name)
    values = [np.asarray(v.value) for v in variables]
    for i, (v, a) in enumerate(zip(variables, values)):
        check_dtype(a, "broadcast_variables", variable_label(v, i))
    outs = [np.empty_like(a) for a in values]
    ps = process_set_kwargs(_ops.broadcast_async, process_set)
    _ops.wait_all([_ops.broadcast_async(a, int(root_rank), output=o, name=f"{base}.{i}", **ps)
                   for i, (a, o) in enumerate(zip(values, outs))])
    for v, o in zip(variables, outs):
        v.assign(o)
