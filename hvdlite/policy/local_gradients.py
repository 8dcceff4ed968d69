"""Gradients kept local (Horovod's ``register_local_var`` / ``register_local_source`` and the
``Partial*`` wrappers): they are not all-reduced, and with ``scale_local_gradients`` they
are divided by the number of ranks, as Horovod does. Written once for the TensorFlow tape and
the Keras optimizer."""

from .groups import apart_and_together


def reduce_except_local(reduce, grads, is_local, scale_local, set_size, divide):
    """``grads`` with those not ``is_local`` replaced by ``reduce(indices)`` (their reduced
    values, in order) and the local ones (not None) by ``divide(g, set_size)`` when
    ``scale_local``."""
    def local(i):
        g = grads[i]
        return divide(g, set_size) if scale_local and g is not None else g
    return apart_and_together(is_local, local, reduce)
