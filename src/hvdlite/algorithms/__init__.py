"""Training algorithms written once, free of any framework (numpy and hvdlite.ops), which the
torch and Keras adapters drive with their own tensors:

- :mod:`.compression`: Horovod's compressor interface and the stateful compression settings;
- :mod:`.error_feedback`, :mod:`.powersgd`: reducers that keep state between steps;
- :mod:`.sharding`: the ZeRO-1 plan (buckets, slices) and which optimizers it is exact for;
- :mod:`.sharded_state`: the unsharded optimizer's numbering of state, to consolidate and
  cut sharded state (and to broadcast it);
- :mod:`.shard_exchange`: the collectives of a sharded step (reduce-scatter, all-gather);
- :mod:`.held_state`: a stateful reducer's step with its state held by the adapter (Keras);
- :mod:`.extra_state`: a wrapper's own state inside the wrapped optimizer's state dict;
- :mod:`.accumulation`: the countdown of ``backward_passes_per_step``;
- :mod:`.local_sgd`: when local SGD steps synchronously and when it averages;
- :mod:`.clipping`: the global norm of sharded gradients, for clipping;
- :mod:`.metric_average`: logged metrics averaged over ranks;
- :mod:`.batch_norm`: synchronous batch normalization's statistics over every rank's batch.
"""
