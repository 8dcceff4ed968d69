"""The hvdlite backend's start-up and shut-down, and its refusals (run at 2 ranks).

A world size that disagrees with the engine's is refused naming both; destroying the default
group stops the engine this module started, and a second init_process_group starts it again;
a group created only by its members (use_local_synchronization) is refused. Plain
``dist.init_process_group("hvdlite")`` (no init_method, no torchrun variables, as under
hvdlite-run or mpirun) starts, and a gloo group made next to it (new_group(backend="gloo"))
carries its own send/recv (the hvdlite backend's own point-to-point: c10d_p2p.py).
"""
import os

import torch

torch.set_num_threads(1)

import torch.distributed as dist  # noqa: E402

import hvdlite  # noqa: E402
import hvdlite.torch.distributed as hvd_dist  # noqa: E402
from worker_checks import check, expect_error  # noqa: E402

expect_error(Exception, lambda: dist.init_process_group("hvdlite", init_method="hvdlite://",
                                                        world_size=5),
             ["world_size=5", "world_size 2"], "a world size the engine does not have")
if dist.is_initialized():
    dist.destroy_process_group()
for round_ in range(2):
    hvd_dist.init_process_group()
    R, N = dist.get_rank(), dist.get_world_size()
    t = torch.full((3,), float(R + 1))
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((3,), float(N * (N + 1) // 2))), f"round {round_}: {t}")
    sub = dist.new_group([0])
    if R == 0:
        u = torch.ones(2)
        dist.all_reduce(u, group=sub)
        check(torch.equal(u, torch.ones(2)), "a group of one rank")
    expect_error(Exception, lambda: dist.new_group([0, 1], use_local_synchronization=True),
                 ["use_local_synchronization"], "groups made by their members only")
    dist.destroy_process_group()
    check(not hvdlite.is_initialized(), "destroying the default group stops the engine it started")

# -- no init_method, no torchrun variables (Note [start-up without init_method]) -------------
for var in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE"):
    os.environ.pop(var, None)
dist.init_process_group("hvdlite")
check(dist.get_backend() == "hvdlite", f"backend {dist.get_backend()}")
check((dist.get_rank(), dist.get_world_size()) == (hvdlite.rank(), hvdlite.size()),
      f"rank {dist.get_rank()} of {dist.get_world_size()} against the engine's "
      f"{hvdlite.rank()} of {hvdlite.size()}")
t = torch.full((2,), float(R + 1))
dist.all_reduce(t)
check(torch.equal(t, torch.full((2,), float(N * (N + 1) // 2))), f"no init_method: {t}")

# -- a gloo group next to the hvdlite one carries its own point-to-point -------------------
buf = torch.zeros(3)
gloo = dist.new_group(backend="gloo")
if R == 0:
    dist.send(torch.arange(3.0), dst=1, group=gloo)
else:
    dist.recv(buf, src=0, group=gloo)
    check(torch.equal(buf, torch.arange(3.0)), f"send/recv over the gloo group: {buf}")
dist.destroy_process_group()
check(not hvdlite.is_initialized(), "the engine started without init_method stops too")
print(f"c10d lifecycle ok rank {R}", flush=True)
