"""FSDP2 (``fully_shard``) on the "hvdlite" backend: a tiny real training on CPU.

Run by tests/torch/test_c10d.py. Each rank trains its part of the global batch with the
parameters sharded over the ranks (all_gather_into_tensor before each layer,
reduce_scatter_tensor of the gradients); the full parameters after a few steps must equal
one process trained on the global batch (rtol 1e-6), and each rank must hold only its shard.
"""
import torch

torch.set_num_threads(1)

import torch.distributed as dist  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

import hvdlite.torch.distributed as hvd_dist  # noqa: E402
from worker_checks import check  # noqa: E402

hvd_dist.init_process_group()
R, N = dist.get_rank(), dist.get_world_size()
PER_RANK, STEPS = 4, 4


def net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                               torch.nn.ReLU(), torch.nn.Linear(32, 4))


def batch(step):
    g = torch.Generator().manual_seed(step)
    return torch.randn(PER_RANK * N, 16, generator=g), torch.randn(PER_RANK * N, 4, generator=g)


reference = net()
ref_opt = torch.optim.Adam(reference.parameters(), lr=1e-2)
for step in range(STEPS):
    x, y = batch(step)
    ref_opt.zero_grad()
    torch.nn.functional.mse_loss(reference(x), y).backward()
    ref_opt.step()

mesh = init_device_mesh("cpu", (N,))
model = net()
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer, mesh=mesh)
fully_shard(model, mesh=mesh)
opt = torch.optim.Adam(model.parameters(), lr=1e-2)
for step in range(STEPS):
    x, y = batch(step)
    mine = slice(R * PER_RANK, (R + 1) * PER_RANK)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x[mine]), y[mine]).backward()
    opt.step()

for (name, p), q in zip(model.named_parameters(), reference.parameters()):
    local = p.to_local()
    check(local.numel() < q.numel() or q.shape[0] < N, f"{name}: rank holds a shard only")
    full = p.full_tensor()
    torch.testing.assert_close(full, q.detach(), rtol=1e-6, atol=1e-6,
                               msg=lambda m: f"FSDP2 {name} vs one process: {m}")
dist.barrier()
dist.destroy_process_group()
print(f"fsdp2 ok rank {R}", flush=True)
