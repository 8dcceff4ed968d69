"""The hvdlite backend's start-up and shut-down, and its refusals (run at 2 ranks).

A world size that disagrees with the engine's is refused naming both; destroying the default
group stops the engine this module started, and a second init_process_group starts it again;
a group created only by its members (use_local_synchronization) is refused.
"""
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
print(f"c10d lifecycle ok rank {R}", flush=True)
