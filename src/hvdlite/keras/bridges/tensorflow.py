"""The TensorFlow bridge: the requests of :mod:`hvdlite.convert.tf_requests` (those under
hvdlite.tensorflow), which cross into the core eagerly and from ``tf.function`` graphs (one
``tf.numpy_function`` per grouped request)."""

import tensorflow as tf

from hvdlite import policy
from hvdlite.convert import tf_requests as requests
from hvdlite.convert.host_call import on_host
from hvdlite.convert.tf_compression import Compression  # noqa: F401 - bridge interface
from hvdlite.convert.tf_requests import make_allreduce_grads_fn, process_set_or_global


def gradient_reducer(name, op, predivide, compression, sparse_as_dense, process_set, what):
    # (Stateful compression never reaches a bridge: src/hvdlite/keras/stateful_compression.py.)
    reduce_all = make_allreduce_grads_fn(name, compression, sparse_as_dense, op, predivide,
                                         what, process_set_or_global(process_set))

    def reduce(grads, variables, when=None):
        if when is None:
            return reduce_all(grads, variables)

        def reduced(present):
            dense = [tf.convert_to_tensor(grads[i]) for i in present]
            return tf.cond(when, lambda: reduce_all(dense, [variables[i] for i in present]),
                           lambda: dense)
        return policy.reduce_present(grads, reduced)

    return reduce


def host_call(fn, args, out_specs, when=None):
    """See hvdlite.keras.bridges: one stateful ``tf.numpy_function`` (graphs keep it in
    program order), or a direct call eagerly."""
    host = on_host(fn, out_specs)
    run = tf.constant(True) if when is None else tf.convert_to_tensor(when)
    args = [tf.convert_to_tensor(a) for a in args]
    if tf.executing_eagerly():
        return [tf.convert_to_tensor(o) for o in host(run.numpy(), *[a.numpy() for a in args])]
    out = tf.numpy_function(host, [run] + args, [tf.as_dtype(d) for _, d in out_specs],
                            stateful=True, name="hvdlite_host_call")
    for o, (s, _) in zip(out, out_specs):
        o.set_shape(s)
    return list(out)


def dense_gradient(g, label, sparse_as_dense, what):
    if isinstance(g, tf.IndexedSlices):
        if not sparse_as_dense:
            raise ValueError(f"{what}: the gradient of '{label}' is a tf.IndexedSlices; "
                             f"backward_passes_per_step > 1 needs sparse_as_dense=True to "
                             f"accumulate it")
        return tf.convert_to_tensor(g)
    return g


def cond(pred, true_fn, false_fn, variables):
    """tf.cond with variable-updating branches (eagerly: a Python branch)."""
    if tf.executing_eagerly():
        return true_fn() if bool(pred) else false_fn()

    def run(fn, result):
        def branch():
            fn()
            return tf.constant(result)
        return branch
    return tf.cond(pred, run(true_fn, True), run(false_fn, False))


def _tensor(value):
    return value if tf.is_tensor(value) or isinstance(value, tf.IndexedSlices) \
        else tf.constant(value)


def allreduce(value, name, op, prescale_factor, postscale_factor, compression, process_set):
    return requests.allreduce(_tensor(value), op, prescale_factor, postscale_factor,
                              compression, name, process_set_or_global(process_set))


def allgather(value, name, process_set):
    return requests.allgather_group([_tensor(value)], name, "allgather",
                                    process_set_or_global(process_set), grouped=False)[0]


def broadcast(value, root_rank, name, process_set):
    return requests.broadcast(_tensor(value), root_rank, name,
                              process_set_or_global(process_set))


def broadcast_variables(variables, root_rank, name, process_set):
    return requests.broadcast_variables(variables, root_rank,
                                        process_set_or_global(process_set), name=name)
