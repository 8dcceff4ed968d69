"""What the ``torch.distributed`` backend ``"hvdlite"`` (hvdlite/torch/distributed.py) decides,
free of torch: the adapter converts tensors and glues c10d; the rules live here, one concept
per module:

- :mod:`.calls`: a group's calls named in call order, and errors that name the call;
- :mod:`.timeouts`: a group's timeout and the error past it;
- :mod:`.call_work`: a c10d Work over hvdlite's, with a future completed on demand;
- :mod:`.completers`: the threads that complete futures nobody waits for;
- :mod:`.shapes`: the size, split and count rules of the collectives;
- :mod:`.group_sets`: the hvdlite process set behind a group, and a group's ranks;
- :mod:`.startup`: who starts and stops the engine;
- :mod:`.rendezvous`: ``hvdlite://``, and when ``init_process_group`` gets it.
"""
