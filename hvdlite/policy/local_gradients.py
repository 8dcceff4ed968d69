"""Gradients kept local (Horovod's ``register_local_var`` / ``register_local_source`` and the
``Partial*`` wrappers): they are not all-reduced, and with ``scale_local_gradients`` they
are divided by the number of ranks, as Horovod does. Written once for the TensorFlow tape and
the Keras optimizer."""


def reduce_except_local(reduce, grads, is_local, scale_local, set_size, divide):
    """``grads`` with those not ``is_local`` replaced by ``reduce(indices)`` (their reduced
    values, in order) and the local ones (not None) by ``divide(g, set_size)`` when
    ``scale_local``."""
    shared = [i for i, local in enumerate(is_local) if not local]
    out = list(grads)
    for i, r in zip(shared, reduce(shared)):
        out[i] = r
    if scale_local:
        for i, local in enumerate(is_local):
            if local and out[i] is not None:
                out[i] = divide(out[i], set_size)
    return out
