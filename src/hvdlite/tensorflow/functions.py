"""Variable and Python-object helpers: ``broadcast_variables``,
``broadcast_global_variables``, ``broadcast_object``, ``allgather_object`` (the object
collectives are hvdlite's numpy ones)."""

import tensorflow as tf

from hvdlite import numpy_api as _np_api

from hvdlite.convert.tf_requests import broadcast_variables  # noqa: F401
from hvdlite.process_sets import global_process_set


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
