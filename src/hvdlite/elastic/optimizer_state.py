"""What an elastic state does for a ``DistributedOptimizer`` beyond its own copy of the
optimizer's state, written once for torch (``TorchState``) and Keras (``KerasState``).

Sharded optimizer state (``shard_optimizer_state=True``): each rank holds only its shard, and
a lost rank takes its shard with it. So

- a commit keeps the whole (consolidated) state on every rank: one all-gather of the
  optimizer state per commit, and the whole state in host memory, as the saved copy of an
  unsharded optimizer;
- ``restore`` loads that copy into the shards as they are cut now;
- ``sync`` broadcasts root's copy, which every rank (one the job added too) cuts for itself:
  root's live shard is only its slice, and a rank the job added holds none. So ``sync`` sends
  the last committed optimizer state;
- ``reset``, when the shards were cut for another size (the job was rebuilt), re-cuts them
  for the new size from that copy.

A ``DistributedOptimizer`` that averages over the job's size learns the new size at ``reset``.

The optimizer is reached through a small protocol, which the sharded torch and Keras
optimizers implement (an optimizer without it is treated as unsharded):

- ``holds_shards()``: whether it holds sharded state now (a Keras one not built yet holds
  none);
- ``consolidated()``: the whole state, on every rank (a collective);
- ``load_consolidated(whole)``: load a ``consolidated()`` result, taken at any size, into the
  shards as they are cut now (local);
- ``needs_reshard()``: whether the shards were cut for another rank or size than this rank
  has now;
- ``reshard(whole)``: re-cut the shards for the current size and load ``whole`` (local);
- ``job_resized()`` (optional, sharded or not): called at every ``reset``.
"""

SYNC_NAME = "hvdlite.elastic.sharded_state"


class OptimizerState:
    """The sharded state's commit rule and the size update of one optimizer (None: none).

    ``save``, ``restore`` and ``sync`` return whether the optimizer holds shards (and so
    whether they took care of its state); ``reset`` returns whether it re-cut them.
    ``broadcast_object(obj, root_rank, name=...)`` is the adapter's object broadcast.
    """

    def __init__(self, optimizer, broadcast_object):
        self.optimizer = optimizer
        self._broadcast_object = broadcast_object
        self.saved = None       # the last commit's whole state (sharded optimizers only)

    def holds_shards(self) -> bool:
        holds = getattr(self.optimizer, "holds_shards", None)
        return holds is not None and holds()

    def save(self) -> bool:
        """Keep the whole state (a collective where the optimizer holds shards)."""
        holds = self.holds_shards()
        self.saved = self.optimizer.consolidated() if holds else None
        return holds

    def restore(self) -> bool:
        if not self.holds_shards():
            return False
        self.optimizer.load_consolidated(self.saved)
        return True

    def sync(self) -> bool:
        """Every rank takes root's copy of the last commit (None there: the optimizer was
        built since, its state is the initial one) and cuts it for itself."""
        if not self.holds_shards():
            return False
        self.saved = self._broadcast_object(self.saved, root_rank=0, name=SYNC_NAME)
        self.optimizer.load_consolidated(self.saved)
        return True

    def reset(self) -> bool:
        """After the job was rebuilt: re-cut the shards if their size changed (every rank
        loads the last commit's whole state), and tell the optimizer the new size."""
        resharded = self.holds_shards() and self.optimizer.needs_reshard()
        if resharded:
            self.optimizer.reshard(self.saved)
        resized = getattr(self.optimizer, "job_resized", None)
        if resized is not None:
            resized()
        return resharded
