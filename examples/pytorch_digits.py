"""Train a small CNN on scikit-learn's handwritten digits, data-parallel with hvdlite.

    hvdlite-run -np 2 python examples/pytorch_digits.py

A Horovod PyTorch script: only the import differs (``import horovod.torch as hvd``).
Each rank trains on its own shard of the training set; gradients are averaged across ranks
during backward; rank 0 prints progress and the test accuracy (the whole test set,
evaluated in shards and summed across ranks). No download: the data ships with
scikit-learn.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import hvdlite.torch as hvd


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)     # 8x8 -> 8x8
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)    # 4x4 -> 4x4
        self.fc1 = nn.Linear(32 * 2 * 2, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def load_data(seed):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    digits = load_digits()
    X = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    idx_train, idx_test = train_test_split(range(len(y)), test_size=0.2, random_state=seed,
                                           stratify=digits.target)
    return X[idx_train], y[idx_train], X[idx_test], y[idx_test]


def evaluate(model, X, y):
    """Accuracy on the whole of (X, y): each rank scores its shard, counts are summed."""
    model.eval()
    with torch.no_grad():
        xs, ys = X[hvd.rank()::hvd.size()], y[hvd.rank()::hvd.size()]
        correct = (model(xs).argmax(1) == ys).sum()
        totals = hvd.allreduce(torch.stack([correct, torch.tensor(len(ys))]).double(),
                               op=hvd.Sum, name="eval.counts")
    model.train()
    return (totals[0] / totals[1]).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="per rank (scaled by size)")
    parser.add_argument("--fp16", action="store_true", help="fp16 gradient compression")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args()

    torch.set_num_threads(1)     # ranks share the machine's cores
    hvd.init()
    torch.manual_seed(args.seed)

    X_train, y_train, X_test, y_test = load_data(args.seed)
    # This rank's shard of the training set.
    X_shard, y_shard = X_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]
    # Every rank must take the same number of steps: drop the incomplete last batch.
    steps_per_epoch = (len(X_train) // hvd.size()) // args.batch_size

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    # Start every rank from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    optimizer = hvd.DistributedOptimizer(
        optimizer, named_parameters=model.named_parameters(),
        compression=hvd.Compression.fp16 if args.fp16 else hvd.Compression.none)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    # Large global batches like a short warm-up; then decay the rate to settle.
    total_steps = args.epochs * steps_per_epoch
    warmup = min(steps_per_epoch, total_steps // 4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(
        (s + 1) / warmup, 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps))))

    if hvd.rank() == 0:
        print(f"{hvd.size()} rank{'s' if hvd.size() > 1 else ''}, {len(X_shard)} training samples "
              f"per rank, {steps_per_epoch} steps per epoch, global batch "
              f"{args.batch_size * hvd.size()}", flush=True)
        if hvd.size() == 1:
            print("(one process: `hvdlite-run -np 2 python examples/pytorch_digits.py` trains "
                  "on 2 ranks)", flush=True)
    start = time.perf_counter()
    generator = torch.Generator().manual_seed(args.seed + hvd.rank())
    for epoch in range(1, args.epochs + 1):
        order = torch.randperm(len(X_shard), generator=generator)
        total_loss = torch.zeros(())
        for step in range(steps_per_epoch):
            idx = order[step * args.batch_size:(step + 1) * args.batch_size]
            optimizer.zero_grad()
            loss = F.cross_entropy(model(X_shard[idx]), y_shard[idx])
            loss.backward()
            optimizer.step()
            scheduler.step()
            total_loss += loss.detach()
        mean_loss = hvd.allreduce(total_loss / steps_per_epoch, name="train.loss").item()
        accuracy = evaluate(model, X_test, y_test)
        if hvd.rank() == 0:
            print(f"epoch {epoch:2d}  loss {mean_loss:.4f}  test accuracy {accuracy:.2%}  "
                  f"({time.perf_counter() - start:.1f} s)", flush=True)
    if hvd.rank() == 0:
        print(f"final test accuracy {accuracy:.2%} in {time.perf_counter() - start:.1f} s",
              flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
