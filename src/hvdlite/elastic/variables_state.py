"""Elastic state made of variables, free of any framework: anything ``numpy.array(v)`` reads
and ``v.assign(value)`` writes (TensorFlow's and Keras' variables, on every backend).

``commit`` keeps copies of the variables' values, ``restore`` assigns them back, ``sync``
broadcasts them from rank 0 and keeps the result as the committed state (as Horovod).
"""

import numpy as np

from .state import ObjectState


class VariablesState(ObjectState):
    """Elastic state of some variables and picklable attributes (epoch, batch...).

    Subclasses say which variables (``_variables()``); the adapter gives its
    ``broadcast_variables(variables, root_rank=...)``, object broadcast and rank.
    """

    def __init__(self, broadcast_variables, bcast_object, get_rank, **kwargs):
        self._broadcast_variables = broadcast_variables
        self._save_variables()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank, **kwargs)

    def _variables(self):
        raise NotImplementedError

    def _save_variables(self):
        self._saved = [np.array(v) for v in self._variables()]

    def _load_variables(self):
        variables = self._variables()
        for v, value in zip(variables, self._saved):
            v.assign(value)
        # Variables made after the last commit (an optimizer built since) had their initial
        # value then: zero (slots, accumulators; not the learning rate, made before).
        for v in variables[len(self._saved):]:
            v.assign(np.zeros(v.shape, dtype=np.array(v).dtype))

    def save(self):
        self._save_variables()
        super().save()

    def restore(self):
        self._load_variables()
        super().restore()

    def sync(self):
        variables = self._variables()
        if variables:
            self._broadcast_variables(variables, root_rank=0)
        self._save_variables()
        super().sync()
