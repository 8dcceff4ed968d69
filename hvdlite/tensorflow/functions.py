"""Variable and Python-object helpers: ``broadcast_variables``,
``broadcast_global_variables``, ``broadcast_object``, ``allgather_object`` (the object
collectives are hvdlite's numpy ones)."""

import tensorflow as tf

from hvdlite import numpy_api as _np_api

from .mpi_ops import broadcast_, global_process_set


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False,
                        name=None):
    """Assign ``root_rank``'s values to ``variables`` on every rank.

    Works for ``tf.Variable`` and Keras variables, eagerly (returns None) and inside a
    graph (returns the grouped assign op). All variables go to the core together, so they
    negotiate in the same round. ``inplace`` is accepted for Horovod compatibility (the
    values are always assigned in place).
    """
    variables = list(variables)
    if not variables:
        return None if tf.executing_eagerly() else tf.no_op()
    values = broadcast_(variables, root_rank, name=name or None, process_set=process_set)
    return None if tf.executing_eagerly() else tf.group(*values)


def broadcast_global_variables(root_rank):
    """A TF1-style graph's op assigning ``root_rank``'s values to every global variable.

    As in Horovod, eagerly there are no global variables to find: it raises RuntimeError
    (use ``broadcast_variables(model.variables, root_rank)``).
    """
    if tf.executing_eagerly():
        raise RuntimeError("hvdlite.tensorflow.broadcast_global_variables() does not support "
                           "eager execution; use broadcast_variables(<model/optimizer "
                           "variables>, root_rank) instead")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def broadcast_object(obj, root_rank=0, session=None, name=None,
                     process_set=global_process_set):
    """Pickle ``obj`` on ``root_rank`` and return the unpickled copy on every rank.
    Call it eagerly; every rank must call it (``session`` is accepted for Horovod)."""
    return _np_api.broadcast_object(obj, root_rank, name, process_set)


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Pickle ``obj`` on every rank and return the list of every rank's object, in rank
    order. Call it eagerly; every rank must call it."""
    return _np_api.allgather_object(obj, name, process_set)
