"""Lightning's Trainer with DDPStrategy(process_group_backend="hvdlite"): a tiny training.

Run by tests/torch/test_c10d.py under mpirun (Lightning finds the ranks through
its MPI environment and initialises torch.distributed with env://). Checks: the group runs
on hvdlite, the loss falls, and every rank ends with the same weights.
"""
import torch

torch.set_num_threads(1)

import lightning as L  # noqa: E402
import torch.distributed as dist  # noqa: E402
from lightning.pytorch.strategies import DDPStrategy  # noqa: E402

import hvdlite.torch.distributed  # noqa: E402,F401  registers the backend
from worker_checks import check  # noqa: E402


class Regression(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        self.losses = []

    def training_step(self, batch, _):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


g = torch.Generator().manual_seed(0)
x = torch.randn(256, 8, generator=g)
y = x @ torch.randn(8, 1, generator=g)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=16)
size = int(__import__("os").environ.get("OMPI_COMM_WORLD_SIZE", "2"))
torch.manual_seed(0)
model = Regression()
trainer = L.Trainer(accelerator="cpu", devices=size, num_nodes=1, max_epochs=3,
                    strategy=DDPStrategy(process_group_backend="hvdlite"), logger=False,
                    enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False)
trainer.fit(model, loader)
check(dist.is_initialized() and dist.get_backend() == "hvdlite", "Lightning's group is hvdlite")
first, last = sum(model.losses[:4]) / 4, sum(model.losses[-4:]) / 4
check(last < 0.5 * first, f"the loss falls: {first:.4f} -> {last:.4f}")
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
every = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
dist.all_gather(every, flat)
check(all(torch.equal(e, flat) for e in every), "every rank has the same weights")
print(f"lightning ok rank {dist.get_rank()} loss {first:.4f} -> {last:.4f}", flush=True)
