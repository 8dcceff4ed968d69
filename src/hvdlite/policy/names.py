"""Request names: generated names in call order (equal on ranks that call ops in the same
order), the members of a grouped call, errors that say what a name stands for, how they name a
variable, and the names of an optimizer's parameters (``named_parameters``)."""

import itertools
import threading
import weakref
from typing import List, Optional

from ..exceptions import HvdliteInvalidArgumentError

# Note [unnamed names after a failure]
# Unnamed collectives are named in call order: the n-th unnamed all-reduce of process set s
# is 'allreduce.noname.n' on every rank that calls them in the same order. A rank that skips
# one (a test failed on that rank only, an exception between two collectives) stays one
# behind forever, and every later unnamed collective waits for a name the others never
# submit. The ranks learn that they disagree only through a failure every member of the set
# agrees on in one negotiation round: a deadlock (each member waits on what the others never
# submitted) or an error response (a mismatch: each submitted the name with other arguments;
# a joined rank, which submitted nothing, sees the response too). Rounds are counted alike on
# every member (csrc/engine/controller.h), and the core stamps every request it completes
# with the round of the set's last such failure (Outcome::agreed_round). When a wait returns
# an outcome stamped with a failure this rank has not met yet (csrc/bindings.cc,
# realign_names), the set's numbering starts over: its counters are dropped, and names
# counted from then on carry the round, 'allreduce.noname.r<round>.n', so every member's next
# unnamed collective has the same name again, whatever each had counted before, and none
# collides with an older request still pending. On a member whose request failed, that wait
# is the failed request's own (the error follows); on a joined member it is its join's.
# Counters kept elsewhere (a TensorFlow graph's while it is built, a c10d group's:
# NameCounters) start over the same way, and so does the core's numbering of process set
# additions and removals ('hvdlite.add_process_set.<n>', in the global set). The normal path pays one integer comparison per
# wait, in C++; the round is part of a counter's prefix, fixed when the counter is made.
# Numbering realigns in program order, where a rank's wait returns: an unnamed call a rank
# submits after the failing round but before that wait (another thread, an async call not
# yet waited for) is still counted in the old numbering on that rank. A deadlock that fails
# only the ranks that fell behind (Note [the ranks that fell behind] in
# csrc/engine/deadlock.h) leaves the others' requests pending under their old names; its
# agreed failure is then the first round after it that runs something, so the ranks behind
# name what they submit until then in the old numbering too, and meet those requests.

class NameCounters(dict):
    """Counters of unnamed calls, (kind, process set) -> (prefix, count), kept by their
    owner (a TensorFlow graph, a c10d group): they start over with the job-wide ones."""


_name_counters = NameCounters()    # the job-wide counters
_kept_elsewhere = weakref.WeakValueDictionary()  # id -> every other NameCounters alive
_restarted_at = {}                 # process set -> the round its numbering last started over at
_counter_lock = threading.Lock()


def _prefix(process_set: int) -> str:
    restarted = _restarted_at.get(process_set)
    return "" if restarted is None else f"r{restarted}."


def call_number(kind: str, process_set: int = 0, counters: Optional[dict] = None) -> str:
    """The number of this rank's next unnamed ``kind`` call in ``process_set``: ``n``, or
    ``r<round>.n`` once the set's numbering started over (Note [unnamed names after a
    failure]). ``counters``: a NameCounters to count in instead of the job-wide ones."""
    counters = _name_counters if counters is None else counters
    key = (kind, process_set)
    entry = counters.get(key)
    if entry is None:
        with _counter_lock:
            entry = counters.setdefault(key, (_prefix(process_set), itertools.count()))
    prefix, count = entry
    return f"{prefix}{next(count)}"   # next() is atomic under the GIL


def auto_name(kind: str, name: Optional[str] = None, process_set: int = 0,
              counters: Optional[dict] = None) -> str:
    """``name``, or a generated one: ranks that call ops in the same order get equal names.

    Counted per process set: the members of a set agree on its order only. ``counters``:
    a NameCounters to count in instead of the job-wide ones (TensorFlow counts per graph).
    """
    if name is not None:
        return valid_name(name)
    return f"{kind}.noname.{call_number(kind, process_set, counters)}"


def _drop_counters(process_set: int) -> None:
    """Every counter of ``process_set``, job-wide and kept elsewhere, gone (the lock held)."""
    for counters in (_name_counters, *_kept_elsewhere.values()):
        for key in [k for k in counters if k[1] == process_set]:
            del counters[key]


def restart_numbering(process_set: int, round_: int) -> None:
    """The members of ``process_set`` agreed on a failure in negotiation round ``round_``: its
    unnamed calls are numbered afresh from here on (Note [unnamed names after a failure]).
    csrc/bindings.cc calls this when a wait returns an outcome stamped with a failure this
    rank has not met; a round not later than the last one is ignored."""
    with _counter_lock:
        if _restarted_at.get(process_set, -1) >= round_:
            return
        _restarted_at[process_set] = round_
        _drop_counters(process_set)


def forget_process_set(process_set: int) -> None:
    """A process set was just added: its unnamed calls count from 0 on every member, whatever
    a removed set with the same id counted (and whatever round it restarted at)."""
    with _counter_lock:
        _restarted_at.pop(process_set, None)
        _drop_counters(process_set)


def kept_counters() -> NameCounters:
    """A new NameCounters for an owner that counts its own unnamed calls."""
    counters = NameCounters()
    with _counter_lock:
        _kept_elsewhere[id(counters)] = counters
    return counters


def valid_name(name) -> str:
    """``str(name)``, refused by name when the core cannot take it: not valid UTF-8 (a lone
    surrogate, as ``os.fsdecode`` makes of undecodable bytes)."""
    if name.__class__ is str and name.isascii():  # the common case: nothing to encode
        return name
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
        _restarted_at.clear()


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
