"""``DistributedOptimizer(groups=...)`` (Horovod's rule): which gradients go in one grouped
all-reduce. An int n splits the parameters, in rank 0's order, into n contiguous groups of
nearly equal length; a list of lists names the groups, and every parameter it leaves out is
a group of its own."""

import warnings


def split_list(items, n):
    """``n`` contiguous chunks of nearly equal length (Horovod's split_list), empty ones
    dropped."""
    q, r = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + q + (1 if i < r else 0)
        out.append(items[start:end])
        start = end
    return [c for c in out if c]


def check_groups(groups, kind):
    """``groups`` is None, a positive int or a list (of lists of ``kind``)."""
    if groups is None:
        return
    if isinstance(groups, bool) or not (isinstance(groups, list) or
                                         (isinstance(groups, int) and groups > 0)):
        raise ValueError(f"groups should be a positive integer or a list of lists of {kind}.")


def plan_groups(params, groups, is_tensor, kind):
    """The groups (lists of members of ``params``, in order) that ``groups`` asks for;
    tensors named in ``groups`` that are not in ``params`` (no gradient) are left out."""
    check_groups(groups, kind)
    if not isinstance(groups, list):
        return split_list(list(params), groups)
    members = {id(p) for p in params}
    seen, chunks = set(), []
    for group in groups:
        chunk = []
        for p in group:
            if not is_tensor(p):
                raise ValueError(f"groups must consist of {kind}.")
            if id(p) in seen:
                raise ValueError("A parameter can only appear once in groups.")
            seen.add(id(p))
            if id(p) in members:
                chunk.append(p)
        if chunk:
            chunks.append(chunk)
    return chunks + [[p] for p in params if id(p) not in seen]


def groups_arg(groups, num_groups, stacklevel=3):
    """``groups``, or Horovod's deprecated ``num_groups`` (with its DeprecationWarning) where
    ``groups`` is None."""
    if not num_groups:
        return groups
    warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be removed",
                  DeprecationWarning, stacklevel=stacklevel)
    return num_groups if groups is None else groups


def rank0_positions(names, broadcast_object, what):
    """{name: its position in rank 0's order}, so that every rank groups the same members
    (rank 0's ``names`` reach the others through ``broadcast_object(obj, root_rank, name)``);
    ranks with other names than rank 0's raise ValueError."""
    order = broadcast_object(list(names), 0, f"{what}.groups.order")
    if sorted(order) != sorted(names):
        raise ValueError(f"{what}(groups=...): the parameter names differ between rank 0 and "
                         f"this rank")
    return {n: i for i, n in enumerate(order)}


def apart_and_together(apart, alone, together):
    """Results for members ``0 .. len(apart) - 1``, in order: member i by ``alone(i)`` where
    ``apart[i]``, the others by one ``together(indices)`` call (one grouped request) that
    returns theirs in order. The members apart go first, then the group: every rank issues
    its requests in the same order."""
    out = [alone(i) if a else None for i, a in enumerate(apart)]
    rest = [i for i, a in enumerate(apart) if not a]
    for i, r in zip(rest, together(rest)):
        out[i] = r
    return out
