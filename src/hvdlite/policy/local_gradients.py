"""Gradients kept local (Horovod's ``register_local_var`` / ``register_local_source`` and the
``Partial*`` wrappers): they are not all-reduced, and with ``scale_local_gradients`` they
are divided by the number of ranks, as Horovod does. Written once for the TensorFlow tape and
the Keras optimizer."""

from .groups import apart_and_together


def reduce_except_local(reduce, grads, variables, is_local, scale_local, set_size, divide):
    """``grads`` (of ``variables``) with those not ``is_local`` replaced by
    ``reduce(their grads, their variables)`` (the reduced values, in order) and the local ones
    (not None) by ``divide(g, set_size)`` when ``scale_local``."""
    grads, variables = list(grads), list(variables)

    def local(i):
        g = grads[i]
        return divide(g, set_size) if scale_local and g is not None else g

    def shared(indices):
        return reduce([grads[i] for i in indices], [variables[i] for i in indices])
    return apart_and_together(is_local, local, shared)
