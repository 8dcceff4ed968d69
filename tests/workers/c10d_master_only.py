"""``dist.init_process_group("hvdlite")`` with MASTER_ADDR / MASTER_PORT exported but neither
RANK nor WORLD_SIZE, as sbatch scripts written for torchrun do (Note [start-up without
init_method]). Run by tests/torch/test_c10d.py under mpirun. ``argv[1]``: ``here`` (MASTER_ADDR
is this host: rank 0's store listens on MASTER_PORT, ranks are the engine's) or ``elsewhere``
(MASTER_ADDR is not rank 0's host: every rank gets the error naming it).
"""
import os
import sys

import torch

torch.set_num_threads(1)

import torch.distributed as dist  # noqa: E402

import hvdlite  # noqa: E402
import hvdlite.torch.distributed  # noqa: E402,F401
from hvdlite.exceptions import HvdliteInvalidArgumentError  # noqa: E402
from worker_checks import check  # noqa: E402

for var in ("RANK", "WORLD_SIZE"):
    check(var not in os.environ, f"{var} must not be set for this test")
how = sys.argv[1]
if how == "here":
    dist.init_process_group("hvdlite")
    R, N = dist.get_rank(), dist.get_world_size()
    check((R, N) == (hvdlite.rank(), hvdlite.size()), f"rank {R} of {N} is the engine's")
    store = dist.distributed_c10d._get_default_store()
    while hasattr(store, "underlying_store"):   # c10d wraps it in PrefixStores
        store = store.underlying_store
    check(store.port == int(os.environ["MASTER_PORT"]), f"the store listens on {store.port}")
    t = torch.full((2,), float(R + 1))
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((2,), float(N * (N + 1) // 2))), f"all_reduce: {t}")
    dist.destroy_process_group()
    print(f"master only ok rank {R}", flush=True)
else:
    try:
        dist.init_process_group("hvdlite")
    except HvdliteInvalidArgumentError as e:
        check(f"MASTER_ADDR={os.environ['MASTER_ADDR']} (the store's host) is not the host of "
              f"rank 0" in str(e), str(e))
        print(f"refused: {e}", flush=True)
    else:
        check(False, "init_process_group accepted a MASTER_ADDR that is not rank 0's host")
