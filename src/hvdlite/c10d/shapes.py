"""The size, split and count rules of c10d's collectives on hvdlite, over anything with
``shape`` and ``dtype`` (torch tensors, numpy arrays); each error names the call, the tensor
and both sizes."""

import math

from hvdlite.exceptions import HvdliteInvalidArgumentError

BAD = HvdliteInvalidArgumentError


def describe(t):
    return f"shape {list(t.shape)}, dtype {t.dtype}"


def check_count(what, label, n, size):
    """``label`` holds one tensor per group rank."""
    if n != size:
        raise BAD(f"{what}: {label} is a list of {n} tensors for a group of {size} ranks")


def check_per_rank(what, tensors, label, like, like_label, size, check, error=BAD, why=""):
    """One tensor per group rank, each passing ``check(tensor, its label)`` and with
    ``like``'s size and dtype (else ``error``, ``why`` appended)."""
    check_count(what, label, len(tensors), size)
    for r, x in enumerate(tensors):
        check(x, f"{label}[{r}]")
        if math.prod(x.shape) != math.prod(like.shape) or x.dtype != like.dtype:
            raise error(f"{what}: {label}[{r}] ({describe(x)}) does not match {like_label} "
                        f"({describe(like)}){why}")


def check_blocks(what, whole, whole_label, block, block_label, size, same_dtype=True):
    """``whole`` holds ``size`` blocks of ``block``'s size (and dtype, ``same_dtype``)."""
    if (math.prod(whole.shape) != math.prod(block.shape) * size
            or (same_dtype and whole.dtype != block.dtype)):
        raise BAD(f"{what}: {whole_label} ({describe(whole)}) must hold {size} "
                  f"{'blocks like' if same_dtype else 'times'} {block_label} ({describe(block)})")


def check_splits(what, rows, input_splits, size):
    """all_to_all_single splits dimension 0 (``rows``; None: a scalar) by ``input_splits``,
    or where none are given into ``size`` equal parts."""
    if rows is None:
        raise BAD(f"{what}: the input is a scalar; all_to_all_single splits dimension 0")
    if not input_splits and rows % size:
        raise BAD(f"{what}: dimension 0 of the input ({rows}) does not divide into {size} "
                  f"equal parts; pass input_split_sizes")


def check_received(what, unit, received, wanted, wanted_as):
    """What arrived from each rank is what the outputs take."""
    if received != wanted:
        raise BAD(f"{what}: received {unit} {received} from the ranks, but {wanted_as} {wanted}")


def check_one_dtype(what, tensors):
    dtypes = {t.dtype for t in tensors}
    if len(dtypes) != 1:
        raise BAD(f"{what}: the tensors mix dtypes {sorted(map(str, dtypes))}")


def check_lists(what, lengths, each, size):
    """allgather_coalesced: ``size`` output lists (their ``lengths``), one tensor per input
    (``each``) in each."""
    if len(lengths) != size or any(n != each for n in lengths):
        raise BAD(f"{what}: needs {size} output lists (one per rank) of {each} tensors (one "
                  f"per input); got {list(lengths)}")


def check_equal(what, label, n, wanted, error=BAD):
    """A count (or index) the backend takes only one value of."""
    if n != wanted:
        raise error(f"{what}: {label} is {n}; the hvdlite backend takes {wanted}")
