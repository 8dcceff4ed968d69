"""The unsharded optimizer's state layout, for consolidating sharded state (ZeRO-1) and
cutting it again: parameters numbered across their groups in order (as
``torch.optim.Optimizer.state_dict`` numbers them), each group's options kept. Works on
plain dicts and lists; parameters are matched by identity."""

from hvdlite import ops as _ops
from hvdlite.exceptions import HvdliteInvalidArgumentError


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
