"""The size, split and count rules of c10d's collectives on hvdlite, over anything with
``shape`` and ``dtype`` (a torch tensor, a numpy array): one rule each, the error naming the
call, the tensor and both sizes."""

import math

from hvdlite.exceptions import HvdliteInvalidArgumentError, HvdliteUnsupportedError


def describe(t):
    return f"shape {list(t.shape)}, dtype {t.dtype}"


def numel(t):
    return math.prod(t.shape)


def check_count(what, label, n, size):
    """``label`` holds one entry per group rank."""
    if n != size:
        raise HvdliteInvalidArgumentError(
            f"{what}: {label} is a list of {n} tensors for a group of {size} ranks")


def check_per_rank(what, tensors, label, like, like_label, size, check,
                   error=HvdliteInvalidArgumentError, why=""):
    """``tensors``: one per group rank, each passing ``check(tensor, its label)`` and with
    ``like``'s size and dtype (else ``error``, ``why`` appended)."""
    check_count(what, label, len(tensors), size)
    for r, x in enumerate(tensors):
        check(x, f"{label}[{r}]")
        if numel(x) != numel(like) or x.dtype != like.dtype:
            raise error(f"{what}: {label}[{r}] ({describe(x)}) does not match {like_label} "
                        f"({describe(like)}){why}")


def check_blocks(what, whole, whole_label, block, block_label, size, same_dtype=True):
    """``whole`` holds ``size`` blocks of ``block``'s size (and dtype, ``same_dtype``)."""
    if numel(whole) != numel(block) * size or (same_dtype and whole.dtype != block.dtype):
        like = "blocks like" if same_dtype else "times"
        raise HvdliteInvalidArgumentError(
            f"{what}: {whole_label} ({describe(whole)}) must hold {size} {like} {block_label} "
            f"({describe(block)})")


def check_splits(what, rows, input_splits, size):
    """all_to_all_single: dimension 0 (``rows``; None for a scalar) is split by
    ``input_splits``, or into ``size`` equal parts where none are given."""
    if rows is None:
        raise HvdliteInvalidArgumentError(
            f"{what}: the input is a scalar; all_to_all_single splits dimension 0")
    if not input_splits and rows % size:
        raise HvdliteInvalidArgumentError(
            f"{what}: dimension 0 of the input ({rows}) does not divide into {size} equal "
            f"parts; pass input_split_sizes")


def check_received(what, unit, received, wanted, wanted_as):
    """What arrived from each rank (``received``) is what the outputs take (``wanted``)."""
    if received != wanted:
        raise HvdliteInvalidArgumentError(
            f"{what}: received {unit} {received} from the ranks, but {wanted_as} {wanted}")


def check_one_dtype(what, tensors):
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1:
        raise HvdliteInvalidArgumentError(f"{what}: the tensors mix dtypes "
                                          f"{sorted(map(str, dtypes))}")


def check_coalesced_outputs(what, lengths, inputs, size):
    """allgather_coalesced: ``size`` output lists (``lengths``) of ``inputs`` tensors each."""
    if len(lengths) != size or any(n != inputs for n in lengths):
        raise HvdliteInvalidArgumentError(
            f"{what}: needs {size} output lists (one per rank) of {inputs} tensors (one per "
            f"input); got {list(lengths)}")


def check_root_lists(what, lists, inputs):
    """gather: the root gives one output list per input."""
    if lists != inputs:
        raise HvdliteInvalidArgumentError(
            f"{what}: the root needs one output list per input; got {lists}")


def check_one_output(what, outputs):
    """scatter: one output tensor."""
    if outputs != 1:
        raise HvdliteUnsupportedError(f"{what}: {outputs} output tensors (only 1)")
