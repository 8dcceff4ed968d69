"""The collectives of one sharded step (ZeRO-1): the buckets' flat gradients reduce-scattered
into this rank's slices, then the updated shards all-gathered back into whole buckets.

- :class:`ShardExchange`, for an adapter that hands every bucket over at once as host arrays
  (Keras, through ``bridge().host_call``): one request per bucket, named by its dtype, all in
  flight together. Each step is a host function ``fn(run, *arrays)``: with ``run`` false (a
  compiled step's branch that does not communicate) it returns zeros of the right shapes and
  sends nothing.
- :func:`wait_each` and :func:`pipelined`, for an adapter that starts the requests itself
  (torch, from its gradient hooks): results used bucket by bucket, and nothing left in
  flight after an error.
"""

import numpy as np

from hvdlite import ops as _ops
from hvdlite.exceptions import HvdliteInvalidArgumentError

from . import sharding


class ShardExchange:
    """The collectives of the buckets ``plans`` (:class:`.sharding.BucketPlan`, of
    ``dtypes``), cut for ``built_for`` ranks of ``process_set``."""

    def __init__(self, plans, dtypes, name, reduction, process_set, built_for, what):
        self.plans, self.dtypes, self.what = list(plans), list(dtypes), what
        self.reduction, self.built_for = reduction, built_for
        self.kw = {} if process_set is None else {"process_set": process_set}
        self.grad_names = [f"{name}.zero.grad.{d}" for d in self.dtypes]
        self.param_names = [f"{name}.zero.param.{d}" for d in self.dtypes]

    def shard_specs(self):
        """(shape, dtype) of each bucket's shard: what :meth:`reduce_scatter` returns."""
        return [((p.shard_numel,), d) for p, d in zip(self.plans, self.dtypes)]

    def bucket_specs(self):
        """(shape, dtype) of each padded bucket: what :meth:`all_gather` returns."""
        return [((p.padded,), d) for p, d in zip(self.plans, self.dtypes)]

    def check_size(self):
        """The shards fit this job only at the size they were cut for."""
        size = sharding.place(self.kw.get("process_set"))[1]
        if size != self.built_for:
            raise HvdliteInvalidArgumentError(
                f"{self.what}: the shards were cut for {self.built_for} ranks but the job now "
                f"has {size} (elastic training resized it) and were not resharded: call "
                f"optimizer.reshard(values) with a consolidate_variables() result "
                f"(hvd.elastic.KerasState does) and trace the train function again")

    def reduce_scatter(self, run, *flats):
        """This rank's reduced slice of each bucket's flat (padded) gradient ``flats``."""
        if not run:
            return [np.zeros(s, d) for s, d in self.shard_specs()]
        self.check_size()
        op, pre, post = self.reduction
        works = [_ops.reducescatter_async(a, n, op, pre, post, **self.kw)
                 for a, n in zip(flats, self.grad_names)]
        return [_ops.wait(w).output for w in works]

    def all_gather(self, run, *shards):
        """Each bucket whole (padded) from every rank's updated ``shards``."""
        if not run:
            return [np.zeros(s, d) for s, d in self.bucket_specs()]
        works = [_ops.allgather_async(a, n, **self.kw)
                 for a, n in zip(shards, self.param_names)]
        return [_ops.wait(w).output for w in works]


def wait_each(works, use):
    """Wait for ``works`` in order, handing each result to ``use(index, result)``; after an
    error, wait for the rest (nothing is left in flight) and re-raise."""
    i = -1
    try:
        for i, work in enumerate(works):
            use(i, _ops.wait(work))
    finally:
        _ops.wait_all(works[i + 1:])


def pipelined(count, start, use):
    """``start(i)`` (a request) for each of ``count`` buckets, two in flight: bucket i + 1
    transfers while ``use(i, result)`` copies bucket i out, so only two results exist at
    once. After an error nothing is left in flight."""
    works = {}

    def begin(i):
        if i < count:
            works[i] = start(i)
    begin(0)
    try:
        for i in range(count):
            begin(i + 1)
            use(i, _ops.wait(works.pop(i)))
    finally:
        _ops.wait_all(list(works.values()))
