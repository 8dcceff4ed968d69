"""The plan of sharded optimizer state (ZeRO stage 1), written once for torch and Keras.

Parameters are packed into buckets, each one flat index space padded to a multiple of the
number of ranks; rank r owns the r-th equal slice of every bucket, and the wrapped optimizer
keeps state for that slice only. Here: which optimizers that is exact for, how buckets are
cut and where each parameter's elements fall in a slice. The adapters move the tensors.
"""

from typing import Iterator, List, NamedTuple, Sequence, Tuple

from hvdlite.exceptions import HvdliteInvalidArgumentError

#: Optimizers whose update of an element depends on that element alone (and on scalars):
#: exact on flat slices that cut through parameters. Matched by class name along the MRO,
#: so subclasses are accepted; names of both torch.optim and keras.optimizers.
ELEMENTWISE = ("SGD", "Adam", "AdamW", "Adamax", "NAdam", "Nadam", "RAdam", "Adagrad",
               "Adadelta", "RMSprop", "Rprop", "Ftrl", "Lion")
#: Optimizers known to look at whole parameters (trust ratios, factored moments, norms,
#: line searches): refused even when they derive from an accepted class.
WHOLE_TENSOR = ("Lamb", "LAMB", "Adafactor", "Muon", "LossScaleOptimizer", "LBFGS",
                "SparseAdam")


def check_shardable(optimizer, what: str) -> None:
    """The one accept-rule of ``shard_optimizer_state=True``, for every framework."""
    names = [c.__name__ for c in type(optimizer).__mro__]
    name = type(optimizer).__name__
    if not any(n in WHOLE_TENSOR for n in names) and any(n in ELEMENTWISE for n in names):
        return
    raise HvdliteInvalidArgumentError(
        f"{what}: shard_optimizer_state=True does not support {name}: sharding cuts "
        f"parameters into flat slices, which is exact only for optimizers that update each "
        f"element from that element alone. Supported: {', '.join(ELEMENTWISE)}. Use "
        f"shard_optimizer_state=False for {name}.")


class Slice(NamedTuple):
    """This rank's part of a bucket of ``numel`` elements cut over ``size`` ranks."""
    shard_numel: int    # elements per rank (the padded bucket splits evenly)
    begin: int          # [begin, end): this rank's slice of the flat index space
    end: int
    padded: int         # shard_numel * size


def cut(numel: int, size: int, rank: int) -> Slice:
    shard_numel = -(-numel // size)     # ceil
    begin = rank * shard_numel
    return Slice(shard_numel, begin, begin + shard_numel, shard_numel * size)


def offsets(numels: Sequence[int]) -> List[int]:
    """Where each piece starts when ``numels`` are packed one after another."""
    out, at = [], 0
    for n in numels:
        out.append(at)
        at += n
    return out


def overlaps(starts: Sequence[int], numels: Sequence[int], begin: int,
             end: int) -> Iterator[Tuple[int, int, int, int]]:
    """(piece index, offset in the piece, offset in [begin, end), length) for each piece
    that overlaps the slice [begin, end)."""
    for i, (start, n) in enumerate(zip(starts, numels)):
        lo, hi = max(begin, start), min(end, start + n)
        if lo < hi:
            yield i, lo - start, lo - begin, hi - lo


def buckets_by_bytes(nbytes: Sequence[int], bucket_bytes: int) -> List[List[int]]:
    """Consecutive pieces (given their sizes in bytes) grouped into buckets of about
    ``bucket_bytes``: a bucket closes before the piece that would overflow it."""
    if int(bucket_bytes) <= 0:
        raise ValueError("bucket_bytes must be > 0")
    buckets, current, size = [], [], 0
    for i, n in enumerate(nbytes):
        if current and size + n > bucket_bytes:
            buckets.append(current)
            current, size = [], 0
        current.append(i)
        size += n
    if current:
        buckets.append(current)
    return buckets
