"""The unsharded optimizer's state layout, for consolidating sharded state (ZeRO-1) and
cutting it again: parameters numbered across their groups in order (as
``torch.optim.Optimizer.state_dict`` numbers them), each group's options kept. Works on
plain dicts and lists; parameters are matched by identity."""

import numpy as np

from hvdlite import ops as _ops
from hvdlite.exceptions import HvdliteInvalidArgumentError
from hvdlite.numpy_api import broadcast_object


def number_state(by_param, model_groups, group_options):
    """The unsharded state dict of ``by_param`` ({id(parameter): state}): parameters of
    ``model_groups`` numbered in order, each group with its ``group_options``."""
    state, groups, index = {}, [], 0
    for options, params in zip(group_options, model_groups):
        ids = []
        for p in params:
            if id(p) in by_param:
                state[index] = by_param[id(p)]
            ids.append(index)
            index += 1
        groups.append(dict(options, params=ids))
    return {"state": state, "param_groups": groups}


def state_by_param(full, model_groups, what):
    """{id(parameter): state} of an unsharded state dict ``full`` whose groups must have as
    many parameters as ``model_groups``."""
    groups = full.get("param_groups")
    counts = [len(ps) for ps in model_groups]
    got = None if groups is None else [len(g["params"]) for g in groups]
    if got != counts:
        raise HvdliteInvalidArgumentError(
            f"{what}: the state dict has parameter groups of sizes {got}; this optimizer's "
            f"groups have {counts} parameters")
    return {id(p): full["state"][i] for g, params in zip(groups, model_groups)
            for i, p in zip(g["params"], params) if i in full["state"]}


def bucket_has_state(names, has_state, what):
    """Whether a bucket's parameters (``names``, and whether each has state) have state: all
    or none of them may."""
    if all(has_state) or not any(has_state):
        return bool(has_state) and has_state[0]
    missing = [n for n, has in zip(names, has_state) if not has]
    raise HvdliteInvalidArgumentError(
        f"{what}: parameters {missing} have no optimizer state while others stepped with "
        f"them do; a sharded optimizer keeps state for all or none of a bucket's parameters")


def gather_slots(plans, slots, name, process_set, to, rank, unwrap):
    """Every rank's per-element state all-gathered whole: ``slots`` maps (bucket index, key)
    to this rank's flat shard of it (the same keys, in the same order, on every rank).
    Returns {(bucket index, key): [each parameter's piece, in its shape]} on rank ``to``
    (every rank when None), None elsewhere; ``unwrap`` turns a gathered result into the
    bucket's flat array. A collective."""
    kw = {} if process_set is None else {"process_set": process_set}
    works = [_ops.allgather_async(shard, f"{name}.{b}.{key}", **kw)
             for (b, key), shard in slots.items()]
    flats = [unwrap(r) for r in _ops.wait_all(works)]
    if to is not None and rank != to:
        return None
    return {key: plans[key[0]].shaped(flat) for key, flat in zip(slots, flats)}


def broadcast_state(rank, root_rank, keys_of, consolidate, load):
    """``broadcast_optimizer_state`` of a sharded optimizer: root's whole state, resharded on
    every rank. Root first says which state it holds (``keys_of()``), so that a rank with
    none yet (fresh, or added by elastic training) takes part in gathering it
    (``consolidate(root_rank, keys)``, a collective); every rank then ``load``s the result."""
    keys = broadcast_object(keys_of() if rank == root_rank else None, root_rank,
                            name="zero.broadcast_state.keys")
    load(broadcast_object(consolidate(root_rank, keys), root_rank, name="zero.broadcast_state"))


def per_element(key, shapes, states) -> bool:
    """Whether state ``key`` of a bucket's parameters (their ``shapes``, their unsharded
    ``states``) holds one value per element (else one per parameter): decided from a
    parameter with a dimension (per-parameter values such as ``step`` are 0-d); a bucket of
    0-d parameters only has ``step`` per parameter in every supported optimizer."""
    for shape, st in zip(shapes, states):
        if len(shape) > 0:
            return tuple(getattr(st[key], "shape", ())) == tuple(shape)
    return key != "step"


def shard_state(plan, names, states, zeros, copy, what):
    """One bucket's shard of its parameters' unsharded ``states`` (one dict each, None where
    a parameter has none; ``names`` for errors): per-element state cut to this rank's slice
    (into ``zeros(shard_numel, like=value)``), the rest the first parameter's (``copy``).
    None when the bucket has no state."""
    if not bucket_has_state(names, [st is not None for st in states], what):
        return None
    return {k: plan.fill_shard(zeros(plan.shard_numel, v), [st[k] for st in states])
            if per_element(k, plan.shapes, states) else copy(v) for k, v in states[0].items()}


def reference_prefix(variable):
    """The start of the names Keras gives the slots it makes for ``variable``
    (``add_variable_from_reference``): its path (else its name) with "/" (and ":") as "_"."""
    if hasattr(variable, "path"):
        return variable.path.replace("/", "_")
    return str(variable.name).replace("/", "_").replace(":", "_")


def slot_key(name, prefixes):
    """(shard index, suffix) of the slot named ``name`` that an optimizer made for one of the
    shards, whose names start with ``prefixes`` (Keras names a slot "<reference>_<suffix>");
    None unless exactly one shard's prefix matches."""
    found = [(k, name[len(p) + 1:]) for k, p in enumerate(prefixes) if name.startswith(p + "_")]
    return found[0] if len(found) == 1 else None


def unsharded_layout(names, before, prebuilt, slot_keys, prefixes, what):
    """Where each variable of the unsharded optimizer (``names`` in its order, the first
    ``before`` its own) lives in the sharded one, which has ``prebuilt`` own variables:
    ("own", index) or ("slot", slot key, position in the bucket). A slot key is (bucket
    index, suffix) (:func:`slot_key`); the unsharded optimizer names that slot of the
    bucket's ``pos``-th variable "<prefixes[bucket][pos]>_<suffix>"."""
    slot_of = {f"{prefixes[key[0]][pos]}_{key[1]}": (key, pos)
               for key in slot_keys for pos in range(len(prefixes[key[0]]))}
    layout = []
    for j, name in enumerate(names):
        if j < before:
            layout.append(("own", j))
        elif name in slot_of:
            layout.append(("slot",) + slot_of[name])
        else:
            raise HvdliteInvalidArgumentError(
                f"{what} has variable {name!r}, which matches no slot of the shards")
    if before != prebuilt:
        raise HvdliteInvalidArgumentError(
            f"{what} has {before} variables before build, this one {prebuilt}")
    return layout


def cut_consolidated(layout, values, plans, dtypes, keys, labels, what, unsharded):
    """The unsharded optimizer's variable ``values`` (in ``layout``'s order; see
    :func:`unsharded_layout`) cut for this rank: ({index of an own variable: its value},
    {slot key: this rank's shard}). A slot key is (bucket index, suffix); ``labels`` name
    each bucket's pieces (the model's variables it packs) in errors."""
    values = [np.asarray(v) for v in values]
    if len(values) != len(layout):
        raise HvdliteInvalidArgumentError(
            f"{what}: got {len(values)} values; {unsharded} has {len(layout)}")
    own, pieces = {}, {key: [np.zeros(n) for n in plans[key[0]].numels] for key in keys}
    for entry, value in zip(layout, values):
        if entry[0] == "own":
            own[entry[1]] = value
            continue
        _, key, pos = entry
        shape = plans[key[0]].shapes[pos]
        if tuple(value.shape) != shape:
            raise HvdliteInvalidArgumentError(
                f"{what}: the {key[1]} of {labels[key[0]][pos]} has shape "
                f"{tuple(value.shape)}; the variable has {shape}")
        pieces[key][pos] = value
    return own, {key: plans[key[0]].fill_shard(np.zeros(plans[key[0]].shard_numel,
                                                        dtypes[key[0]]), ps)
                 for key, ps in pieces.items()}
