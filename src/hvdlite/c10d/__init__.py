"""What the ``torch.distributed`` backend ``"hvdlite"`` (src/hvdlite/torch/distributed.py) decides,
free of torch: the adapter converts tensors and glues c10d; the rules live here.

- :mod:`.calls`: a group's calls named in call order, their errors and timeouts;
- :mod:`.call_work`: a c10d Work over hvdlite's, its future completed on demand;
- :mod:`.shapes`: the size, split and count rules of the collectives;
- :mod:`.group_sets`: the hvdlite process set behind a group, and a group's ranks;
- :mod:`.startup`: who starts and stops the engine, and the ``hvdlite://`` rendezvous.
"""
