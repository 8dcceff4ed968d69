"""``DistributedGradientTape``: every dense gradient of a step goes to the core in ONE
grouped request (one crossing from a graph; :func:`hvdlite.convert.tf_requests.
make_allreduce_grads_fn`, which the Keras TensorFlow bridge shares). Also
``PartialDistributedGradientTape`` and ``register_local_source`` for gradients that stay
local."""

import tensorflow as tf

from hvdlite.policy import Average, local_gradients
from hvdlite.convert.tf_requests import make_allreduce_grads_fn, process_set_or_global

from .compression import Compression
from .mpi_ops import global_process_set


def _var_key(v):
    """A hashable identity for tf.Variables (``ref()``) and Keras variables alike."""
    return v.ref() if hasattr(v, "ref") else id(v)


def _divide(g, n):
    if isinstance(g, tf.IndexedSlices):
        return tf.IndexedSlices(g.values / n, g.indices, g.dense_shape)
    return g / n


class _DistributedGradientTape:
    """Mixed in before the wrapped tape's class: ``gradient`` all-reduces the gradients,
    except those of sources registered as local (divided by size when
    ``scale_local_gradients``, as Horovod)."""

    def __init__(self, tape, allreduce_grads, process_set, scale_local_gradients,
                 persistent=False, watch_accessed_variables=True):
        super().__init__(persistent=persistent,
                         watch_accessed_variables=watch_accessed_variables)
        # Take over what the user's tape recorded.
        self._tape = tape._tape
        self._watched_variables = getattr(tape, "_watched_variables", ())
        self._hvd_allreduce_grads = allreduce_grads
        self._hvd_process_set = process_set
        self._hvd_scale_local = scale_local_gradients
        self._local_sources = set()

    def register_local_source(self, source):
        """Keep ``source``'s gradient local: it is not all-reduced."""
        self._local_sources.add(_var_key(source))

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = super().gradient(target, sources, output_gradients=output_gradients,
                                 unconnected_gradients=unconnected_gradients)
        flat_sources = tf.nest.flatten(sources)
        out = local_gradients.reduce_except_local(
            self._hvd_allreduce_grads, tf.nest.flatten(grads), flat_sources,
            [_var_key(s) in self._local_sources for s in flat_sources], self._hvd_scale_local,
            process_set_or_global(self._hvd_process_set).size(), _divide)
        return tf.nest.pack_sequence_as(grads, out)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None):
        """(``[(local source, gradient)]``, ``[(global source, gradient)]``)."""
        grads = self.gradient(target, sources, output_gradients)
        pairs = list(zip(tf.nest.flatten(sources), tf.nest.flatten(grads)))
        is_local = [_var_key(s) in self._local_sources for s, _ in pairs]
        return ([p for p, loc in zip(pairs, is_local) if loc],
                [p for p, loc in zip(pairs, is_local) if not loc])


def DistributedGradientTape(gradtape, device_dense='', device_sparse='',
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=global_process_set, scale_local_gradients=True,
                            name=None):
    """Wrap a ``tf.GradientTape`` so that ``gradient()`` returns all-reduced gradients.

    Use it after recording::

        with tf.GradientTape() as tape:
            loss = ...
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)

    All dense gradients are all-reduced in one grouped request named ``<name>.<index>``
    (default name "DistributedGradientTape"), eagerly and inside ``tf.function`` alike,
    over ``process_set``. ``tape.register_local_source(v)`` keeps ``v``'s gradient local.
    ``device_dense``/``device_sparse``/``num_groups``/``groups`` are accepted for Horovod
    compatibility (every gradient already goes in one group).
    """
    if not isinstance(gradtape, tf.GradientTape):
        raise TypeError(f"hvdlite.tensorflow.DistributedGradientTape expects a "
                        f"tf.GradientTape, got {type(gradtape).__name__}")
    allreduce_grads = make_allreduce_grads_fn(
        name or "DistributedGradientTape", compression, sparse_as_dense, op,
        gradient_predivide_factor, what="DistributedGradientTape", process_set=process_set)
    cls = type(gradtape.__class__.__name__, (_DistributedGradientTape, gradtape.__class__), {})
    return cls(gradtape, allreduce_grads, process_set, scale_local_gradients,
               persistent=gradtape._persistent,
               watch_accessed_variables=gradtape._watch_accessed_variables)


def PartialDistributedGradientTape(gradtape, device_dense='', device_sparse='',
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set,
                                   local_layers=None, scale_local_gradients=True):
    """A ``DistributedGradientTape`` whose ``local_layers``' trainable weights keep local
    gradients (divided by size when ``scale_local_gradients``, as Horovod)."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    for layer in _as_list(local_layers):
        for var in layer.trainable_weights:
            tape.register_local_source(var)
    return tape


def _as_list(layers):
    if layers is None:
        return []
    return list(layers) if isinstance(layers, (list, tuple)) else [layers]
