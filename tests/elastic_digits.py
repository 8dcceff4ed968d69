"""The elastic tests' training problem (digits, float64) and its one-process reference.

Step s of a job of n ranks trains on the global batch of n * PER_RANK samples starting at
sample s * STRIDE; rank r takes the r-th PER_RANK of them, and the gradients are averaged over
the ranks. The global batch depends on the size, so the result depends on when the membership
changed. The reference replays the same global batches in one process, splitting each into as
many shards as the job had ranks at that step and averaging their gradients the same way: it
applies the same membership changes at the same committed steps.
"""
import numpy as np
import torch
from sklearn.datasets import load_digits

PER_RANK = 16
STRIDE = 64
STEPS = 30
COMMIT_EVERY = 5
LR = 0.05


def data():
    x, y = load_digits(return_X_y=True)
    return torch.tensor(x / 16.0, dtype=torch.float64), torch.tensor(y, dtype=torch.int64)


def global_batch(x, y, step, size):
    rows = (np.arange(size * PER_RANK) + step * STRIDE) % len(x)
    return x[rows], y[rows]


def shard(t, rank):
    return t[rank * PER_RANK:(rank + 1) * PER_RANK]


def model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Tanh(),
                                torch.nn.Linear(32, 10)).double()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    return model, optimizer


def loss_fn(model, x, y):
    return torch.nn.functional.cross_entropy(model(x), y)


def reference(sizes):
    """Final parameters after STEPS steps where step s runs at sizes(s) ranks."""
    x, y = data()
    model, optimizer = model_and_optimizer()
    for step in range(STEPS):
        n = sizes(step)
        xb, yb = global_batch(x, y, step, n)
        grads = None
        for r in range(n):
            model.zero_grad()
            loss_fn(model, shard(xb, r), shard(yb, r)).backward()
            g = [p.grad.clone() for p in model.parameters()]
            grads = g if grads is None else [a + b for a, b in zip(grads, g)]
        for p, g in zip(model.parameters(), grads):
            p.grad = g / n
        optimizer.step()
    return [p.detach().numpy().copy() for p in model.parameters()]
