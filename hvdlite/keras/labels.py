"""What Keras requests share: the set size, the (op, prescale, postscale) of
``gradient_predivide_factor`` over it, and how errors name a variable."""

import inspect

import hvdlite as _hvd
from hvdlite import policy


def set_size(process_set=None):
    """The number of ranks in ``process_set`` (None: all ranks)."""
    return process_set.size() if process_set is not None else _hvd.size()


def reduction(op, predivide, process_set=None):
    """(op, prescale, postscale) for the core under ``gradient_predivide_factor``, over the
    set's ranks."""
    return policy.predivide(op, predivide, set_size(process_set))


def variable_label(variable, i):
    """How an error names the ``i``-th variable."""
    return getattr(variable, "path", None) or getattr(variable, "name", None) or f"variable {i}"


def process_set_kwargs(fn, process_set):
    """``{"process_set": process_set}`` for ``fn`` (nothing for the default set); a clear
    error where ``fn`` cannot take one."""
    if process_set is None:
        return {}
    if "process_set" not in inspect.signature(fn).parameters:
        raise NotImplementedError(f"{fn.__module__}.{fn.__qualname__} does not take "
                                  f"process_set in this build of hvdlite")
    return {"process_set": process_set}
