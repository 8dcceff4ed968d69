"""Hugging Face Accelerate on the "hvdlite" backend: a tiny training.

Run by tests/torch/test_c10d.py under mpirun. Accelerate on CPUs would start a gloo group
itself (it picks gloo or mpi for MULTI_CPU); it keeps a default group that already exists, so
the script starts the hvdlite group first. Checks: the group is hvdlite, Accelerate's DDP
runs on it, the loss falls, every rank ends with the same weights.
"""
import os

import torch

torch.set_num_threads(1)

import torch.distributed as dist  # noqa: E402

import hvdlite.torch.distributed as hvd_dist  # noqa: E402
from worker_checks import check  # noqa: E402

hvd_dist.init_process_group()
os.environ.setdefault("OMP_NUM_THREADS", "1")
from accelerate import Accelerator  # noqa: E402

accelerator = Accelerator(cpu=True)
check(accelerator.num_processes == dist.get_world_size() > 1, "Accelerate sees every rank")
check(dist.get_backend() == "hvdlite", "Accelerate kept the hvdlite group")
g = torch.Generator().manual_seed(0)
x = torch.randn(256, 8, generator=g)
y = x @ torch.randn(8, 1, generator=g)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05)
model, opt, loader = accelerator.prepare(model, opt, loader)
check(isinstance(model, torch.nn.parallel.DistributedDataParallel)
      and model.process_group.name() == "hvdlite", "Accelerate's DDP runs on hvdlite")
losses = []
for epoch in range(3):
    for xb, yb in loader:
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        accelerator.backward(loss)
        opt.step()
        losses.append(loss.item())
first, last = sum(losses[:4]) / 4, sum(losses[-4:]) / 4
check(last < 0.5 * first, f"the loss falls: {first:.4f} -> {last:.4f}")
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
every = accelerator.gather(flat.unsqueeze(0))
check(all(torch.equal(e, flat) for e in every), "every rank has the same weights")
print(f"accelerate ok rank {dist.get_rank()} loss {first:.4f} -> {last:.4f}", flush=True)
dist.destroy_process_group()
