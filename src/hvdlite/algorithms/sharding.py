"""The plan of sharded optimizer state (ZeRO stage 1), written once for torch and Keras.

Parameters are packed, per dtype, into buckets, each one flat index space padded to a
multiple of the number of ranks; rank r owns the r-th equal slice of every bucket. The
wrapped optimizer is built on one 1-D "shard" per bucket instead of the parameters, so its
state (momentum, Adam's moments...) exists for this rank's slice only: about 1/size. A step:

1. the bucket's flat gradient is reduce-scattered: this rank gets its slice, reduced;
2. the shard takes this rank's slice of the parameters and the wrapped optimizer updates it;
3. the updated shards are all-gathered and written back into the parameters.

Reduce-scatter plus all-gather move the same bytes as one ring all-reduce. A flat slice cuts
through parameters, so only optimizers (and options) that update each element from that
element alone are exact: :func:`check_shardable`. Here: that rule, how buckets are cut and
where each parameter's elements fall in a slice. The adapters move the tensors.
"""

import itertools
import math
from typing import Iterator, List, NamedTuple, Sequence, Tuple

from hvdlite import basics
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

#: Keras options that look at a whole variable or at all of them (attributes, refusal).
KERAS_REFUSALS = (
    ("clipnorm", "cannot apply clipnorm (a norm over whole variables); clip the gradients "
                 "before optimizer.apply instead"),
    ("global_clipnorm", "cannot apply global_clipnorm (a norm over whole variables); clip the "
                        "gradients before optimizer.apply instead"),
    ("_exclude_from_weight_decay _exclude_from_weight_decay_names",
     "cannot honour exclude_from_weight_decay (shards mix variables)"),
    ("gradient_accumulation_steps use_ema", "does not combine with Keras' "
     "gradient_accumulation_steps or use_ema (use backward_passes_per_step)"))


def check_shardable(optimizer, what: str) -> None:
    """The one accept-rule of ``shard_optimizer_state=True``, for every framework: the
    optimizer's class, then options that look at whole variables (Keras' attributes)."""
    names = [c.__name__ for c in type(optimizer).__mro__]
    name = type(optimizer).__name__
    if any(n in WHOLE_TENSOR for n in names) or not any(n in ELEMENTWISE for n in names):
        raise HvdliteInvalidArgumentError(
            f"{what}: shard_optimizer_state=True does not support {name}: sharding cuts "
            f"parameters into flat slices, which is exact only for optimizers that update "
            f"each element from that element alone. Supported: {', '.join(ELEMENTWISE)}. Use "
            f"shard_optimizer_state=False for {name}.")
    for attributes, refusal in KERAS_REFUSALS:
        if any(getattr(optimizer, a, None) for a in attributes.split()):
            raise HvdliteInvalidArgumentError(f"{what}: shard_optimizer_state=True {refusal}")


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


class BucketPlan:
    """Pieces of ``shapes`` packed one after another into a bucket's flat index space,
    padded to split evenly over ``size`` ranks; this rank owns [begin, end).

    Works on any flat array that slices (numpy arrays, torch tensors): the adapters hold
    their own tensors and ask the plan where each piece's elements are.
    """

    def __init__(self, shapes: Sequence[Sequence[int]], size: int, rank: int):
        self.shapes = [tuple(int(d) for d in s) for s in shapes]
        self.numels = [math.prod(s) for s in self.shapes]
        self.starts = offsets(self.numels)
        self.numel = sum(self.numels)
        self.shard_numel, self.begin, self.end, self.padded = cut(self.numel, size, rank)

    def shard_overlaps(self) -> Iterator[Tuple[int, int, int, int]]:
        """(piece index, offset in the piece, offset in this rank's shard, length)."""
        return overlaps(self.starts, self.numels, self.begin, self.end)

    def split(self, flat) -> list:
        """Each piece's elements of ``flat`` (the bucket's whole flat space), flat."""
        return [flat[s:s + n] for s, n in zip(self.starts, self.numels)]

    def shaped(self, flat) -> list:
        """Each piece of ``flat`` (the bucket's whole flat space) in its own shape."""
        return [p.reshape(s) for p, s in zip(self.split(flat), self.shapes)]

    def fill_shard(self, shard, pieces):
        """Write this rank's slice of ``pieces`` (one array per piece, of any shape) into
        ``shard`` (the padding is left as it is); returns ``shard``."""
        for i, off, at, n in self.shard_overlaps():
            shard[at:at + n] = pieces[i].reshape(-1)[off:off + n]
        return shard


def place(process_set=None) -> Tuple[int, int]:
    """(rank, size) of this rank among the ranks the shards are cut over (None: all)."""
    if process_set is None:
        return basics.rank(), basics.size()
    return process_set.rank(), process_set.size()


_instances = {}     # process set id -> count of sharded optimizers built over that set


def instance_prefix(process_set=None) -> str:
    """The prefix of the collectives' names of a new sharded optimizer over ``process_set``.

    Optimizers over one process set are built in the same order on each of its ranks (not
    across sets: a rank may be in several): their names carry the set and that number, so
    two sharded optimizers never share a name."""
    set_id = 0 if process_set is None else process_set.process_set_id
    return f"zero{set_id}.{next(_instances.setdefault(set_id, itertools.count()))}"


def check_reshardable(process_set, what: str) -> None:
    """Only shards over all ranks are re-cut when elastic training resizes the job."""
    if process_set is not None:
        raise HvdliteInvalidArgumentError(
            f"{what}: shard_optimizer_state=True over process set "
            f"{process_set.process_set_id} cannot be resharded after the job changed size: "
            f"process sets are not resized; shard over the global set for elastic training")


def check_owner(saved, mine, what: str, remedy: str) -> None:
    """A sharded state saved as ``saved`` = (rank, size, ...) loads only where ``mine``
    is the same."""
    if tuple(saved) != tuple(mine):
        raise HvdliteInvalidArgumentError(
            f"{what}: this sharded optimizer state was saved by rank {saved[0]} of {saved[1]}"
            f"{_extra(saved)}; this is rank {mine[0]} of {mine[1]}{_extra(mine)}. {remedy}")


def _extra(owner):
    return f" (buckets of {list(owner[2])} elements)" if len(owner) > 2 else ""


def plan_buckets(dtypes: Sequence, nbytes: Sequence[int],
                 bucket_bytes=None) -> List[List[int]]:
    """Which pieces (their dtypes and sizes in bytes, in packing order) share a bucket: one
    dtype per bucket (dtypes in the order of their names), each cut into buckets of about
    ``bucket_bytes`` (None: one bucket per dtype). Depends on nothing but these, not on the
    number of ranks: a resize re-cuts the same buckets into new slices."""
    out = []
    for dtype in sorted(set(dtypes), key=str):
        same = [i for i, d in enumerate(dtypes) if d == dtype]
        chunks = [range(len(same))] if bucket_bytes is None else \
            buckets_by_bytes([nbytes[i] for i in same], bucket_bytes)
        out += [[same[j] for j in chunk] for chunk in chunks]
    return out


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
