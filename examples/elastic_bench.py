"""The cost of ``state.commit()`` (hvdlite.torch.elastic.TorchState) against one training step.

    hvdlite-run -np 2 --min-np 1 python examples/elastic_bench.py

For the digits MLP (2.4 k parameters) and a 25 M-parameter MLP (5000x5000 + 5000x10,
SGD with momentum), prints the median time of commit() (deep copies of the model's and the
optimizer's state plus the host-update check, one small broadcast), of one training step
(forward, backward, all-reduce, update) measured in the same run, and their ratio
(commit / step: below 1 means a commit costs less than a step).
"""
import statistics
import time

import torch

import hvdlite.torch as hvd

torch.set_num_threads(1)
hvd.init()


def measure(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench(name, model, inputs, classes, repeats):
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                         named_parameters=model.named_parameters())
    x = torch.randn(16, inputs)
    y = torch.randint(0, classes, (16,))

    def step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    step()   # builds the momentum buffers, so commits copy them too
    state = hvd.elastic.TorchState(model, optimizer, epoch=0, batch=0)
    step_s = measure(step, repeats)
    commit_s = measure(state.commit, repeats)
    save_s = measure(state.save, repeats)   # the copies alone, without the host-update check
    params = sum(p.numel() for p in model.parameters())
    if hvd.rank() == 0:
        print(f"{name}: {params / 1e6:.3f} M parameters, {hvd.size()} ranks: commit "
              f"{commit_s * 1e3:.2f} ms (copies {save_s * 1e3:.2f} ms), step {step_s * 1e3:.2f} ms, commit/step "
              f"{commit_s / step_s:.2f}", flush=True)


bench("digits MLP", torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Tanh(),
                                        torch.nn.Linear(32, 10)), 64, 10, 50)
bench("25M MLP", torch.nn.Sequential(torch.nn.Linear(5000, 5000), torch.nn.ReLU(),
                                     torch.nn.Linear(5000, 10)), 5000, 10, 5)
