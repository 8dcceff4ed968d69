"""One step of a stateful reducer (:mod:`.error_feedback`, :mod:`.powersgd`) whose state an
adapter keeps in variables of its own (Keras' optimizer variables) and hands over, with the
gradients, in one flat list of arrays (``bridge().host_call``), getting it back updated.

Error buffers belong to the rank and size that made them (the ``owner`` array that travels
with them): restored anywhere else they restart at zero, as ``load_state_dict`` does; the
low-rank factors Q are the same on every rank and are kept.
"""

import numpy as np


def state_plan(reducer, names, shapes, dtypes, floats, size):
    """The state each gradient (``names``, ``shapes``, ``dtypes``) keeps when reduced over
    ``size`` ranks: (whether it keeps an error buffer, its initial Q or None). Dtypes that
    are not in ``floats`` keep none (they are refused if they ever have a gradient)."""
    return [(reducer.keeps_error(tuple(shape), size),
             reducer.initial_q(name, tuple(shape), np.dtype(dtype))) if dtype in floats
            else (False, None) for name, shape, dtype in zip(names, shapes, dtypes)]


class HeldStateStep:
    """``step(run, *arrays)`` for the gradients ``present`` this step (indices into
    ``names``), whose state is in ``state`` ({"errors" or "qs": {gradient index: holder}},
    the holders being the adapter's variables): :attr:`holders` lists those this step
    touches. The arrays: the gradients, the holders' values in that order, the step counter,
    the owner (rank, size). Returns them updated, in the same order."""

    def __init__(self, reducer, names, present, state, reduction, me):
        held = [(kind, i) for kind in ("errors", "qs") for i in present if i in state[kind]]
        self.reducer, self.names = reducer, [names[i] for i in present]
        self.held = [(kind, names[i]) for kind, i in held]     # (kind, gradient name)
        self.holders = [state[kind][i] for kind, i in held]
        self.reduction, self.me = reduction, np.array(me, np.int32)

    def __call__(self, run, *arrays):
        if not run:
            return list(arrays)
        n = len(self.names)
        grads = [np.array(g, order="C") for g in arrays[:n]]
        own = np.array_equal(arrays[-1], self.me)     # else restored from another rank or size
        given = {"errors": {}, "qs": {}}
        for (kind, name), a in zip(self.held, arrays[n:-2]):
            given[kind][name] = a if own or kind == "qs" else np.zeros_like(a)
        errors, qs, step = self.reducer.reduce_with_state(
            grads, self.names, given["errors"], given["qs"], arrays[-2], *self.reduction)
        back = {"errors": errors, "qs": qs}
        return grads + [back[k].get(name, given[k][name]) for k, name in self.held] + [
            np.asarray(step, np.int32), self.me]
