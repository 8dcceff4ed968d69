"""Request names: generated names in call order (equal on ranks that call ops in the same
order), the members of a grouped call, errors that say what a name stands for, how they name a
variable, and the names of an optimizer's parameters (``named_parameters``)."""

import itertools
import threading
from typing import List, Optional

from ..exceptions import HvdliteInvalidArgumentError

_name_counters = {}
_counter_lock = threading.Lock()


def auto_name(kind: str, name: Optional[str] = None, process_set: int = 0,
              counters: Optional[dict] = None) -> str:
    """``name``, or a generated one: ranks that call ops in the same order get equal names.

    Counted per process set: the members of a set agree on its order only. ``counters``:
    where to count instead of the job-wide counters (TensorFlow counts per graph).
    """
    if name is not None:
        return valid_name(name)
    with _counter_lock:
        counters = _name_counters if counters is None else counters
        counter = counters.setdefault((kind, process_set), itertools.count())
        return f"{kind}.noname.{next(counter)}"


def valid_name(name) -> str:
    """``str(name)``, refused by name when the core cannot take it: not valid UTF-8 (a lone
    surrogate, as ``os.fsdecode`` makes of undecodable bytes)."""
    name = str(name)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as e:
        raise HvdliteInvalidArgumentError(
            f"the name {name!r} is not valid UTF-8 ({e.reason} at index {e.start}); collective "
            "names must be valid UTF-8") from None
    return name


def reset_name_counters() -> None:
    """init() calls this so that a re-initialised job starts its generated names afresh."""
    with _counter_lock:
        _name_counters.clear()


def group_names(base: Optional[str], n: int) -> Optional[List[str]]:
    """Names of the members of a grouped call: ``base.i``; None (the collective generates
    names, counted in its process set) when there is no base name."""
    if base is None:
        return None
    return [f"{base}.{i}" for i in range(n)]


def member_names(base: Optional[str], n: int) -> List[Optional[str]]:
    """Names of the members of a grouped call, one per member: ``base.i``, or None each (a
    name generated per member) when there is no base name."""
    return [None] * n if base is None else group_names(base, n)


def with_labels(error, labels):
    """The error again, its message followed by what the request names in it stand for
    (``'DistributedSGD.0' is the gradient of dense/kernel``); ``labels``: {request name:
    what it is}. The error itself where it names none of them."""
    text = str(error)
    hits = [f"'{n}' is the {what}" for n, what in (labels or {}).items() if f"'{n}'" in text]
    if not hits:
        return error
    try:
        return type(error)(f"{text} ({'; '.join(hits)})")
    except Exception:  # noqa: BLE001 - an error type with another constructor
        return error


def variable_label(variable, i):
    """How an error names the ``i``-th variable (a Keras or TensorFlow variable)."""
    return getattr(variable, "path", None) or getattr(variable, "name", None) or f"variable {i}"


def parameter_names(param_groups, named_parameters, what):
    """{id(param): name} for every parameter of ``param_groups`` (lists of parameters);
    names must be unique, and ``named_parameters`` (Horovod's argument: (name, parameter)
    pairs) must name them all. Without it, names follow the parameter order (the same on
    every rank)."""
    if named_parameters is None:
        return {id(p): f"{what}.noname.{i}.{j}"
                for i, group in enumerate(param_groups) for j, p in enumerate(group)}
    named_parameters = list(named_parameters)
    if any(not isinstance(item, tuple) or len(item) != 2 for item in named_parameters):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    names = [str(n) for n, _ in named_parameters]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise ValueError("Parameter names in named_parameters must be unique. Found "
                         "duplicates: %s" % ", ".join(dups))
    by_id = {id(p): str(n) for n, p in named_parameters}
    unnamed = [p for group in param_groups for p in group if id(p) not in by_id]
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters "
                         "were not named (shapes: %s). Pass every parameter the optimizer "
                         "updates, e.g. model.named_parameters()."
                         % ", ".join(str(list(p.shape)) for p in unnamed))
    return by_id


def named_entries(params, prefix=None):
    """The ``(name, value)`` entries of Horovod's ``broadcast_parameters`` argument: a dict
    (by key, sorted: every rank sends in the same order) or an iterable of values or of
    ``(name, value)`` pairs (unnamed values: name None). Names get ``prefix`` in front."""
    if isinstance(params, dict):
        items = sorted(params.items(), key=lambda kv: str(kv[0]))
    else:
        try:
            items = [p if isinstance(p, tuple) else (None, p) for p in params]
        except TypeError:
            raise ValueError("invalid params of type: %s" % type(params)) from None
    if prefix is None:
        return items
    return [(name if name is None else f"{prefix}{name}", p) for name, p in items]
