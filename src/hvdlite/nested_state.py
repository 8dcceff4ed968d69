"""A nested state (dicts, lists and tuples, as an optimizer's ``state_dict()``) split into
its skeleton, which pickles small, and its tensors, which travel by broadcasts; and put
back together. Free of any framework: the caller says what a tensor is."""

from collections import namedtuple

TensorSlot = namedtuple("TensorSlot", "index shape dtype")
TensorSlot.__doc__ = "Where a tensor stood in a skeleton: its index, shape and dtype."


def map_structure(obj, leaf, is_leaf):
    """``obj`` with ``leaf(x)`` applied to every ``x`` that ``is_leaf`` in dicts, lists and
    tuples (named tuples are leaves' metadata, kept as they are)."""
    if is_leaf(obj):
        return leaf(obj)
    if isinstance(obj, dict):
        return {k: map_structure(v, leaf, is_leaf) for k, v in obj.items()}
    if isinstance(obj, list):
        return [map_structure(v, leaf, is_leaf) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(map_structure(v, leaf, is_leaf) for v in obj)
    return obj


def _is_slot(obj):
    return isinstance(obj, TensorSlot)


def split(obj, is_tensor):
    """(``obj``'s skeleton, with a :class:`TensorSlot` in place of each tensor, the tensors
    in order). Tensors need ``shape`` and ``dtype``."""
    tensors = []

    def slot(t):
        tensors.append(t)
        return TensorSlot(len(tensors) - 1, tuple(t.shape), t.dtype)
    return map_structure(obj, slot, is_tensor), tensors


def slots(skeleton):
    """The skeleton's :class:`TensorSlot` s, in the order of their tensors."""
    found = []
    map_structure(skeleton, found.append, _is_slot)
    return found


def join(skeleton, tensors):
    """The skeleton with each slot replaced by its tensor."""
    return map_structure(skeleton, lambda s: tensors[s.index], _is_slot)
