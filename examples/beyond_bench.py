"""Measure the options beyond Horovod: accuracy and bytes per step on digits, state memory.

    hvdlite-run -np 2 python examples/beyond_bench.py digits    # every option on the digits CNN
    hvdlite-run -np 2 python examples/beyond_bench.py memory [--sharded]   # Adam, 25 M params

digits: trains the CNN of examples/pytorch_digits.py (same data, schedule and seed) once per
option: synchronous SGD (the baseline), sharded optimizer state, PowerSGD, top-k, fp16 with
error feedback, local SGD. For each it prints the final test accuracy, its difference from
the baseline, the data bytes each rank sent per training step (read from the core's
transport counters, not computed), the factor the method promises for those bytes, the
measured factor against the baseline, and the step time (loopback: compression costs compute
here and saves a network this machine does not have).

memory: Adam on a 25 M-parameter MLP, unsharded or sharded, 3 steps: optimizer state bytes
per rank (the state tensors) and each rank's peak resident memory (one configuration per run,
so the peak is that configuration's).
"""
import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hvdlite.torch as hvd  # noqa: E402
from hvdlite import _core  # noqa: E402
from pytorch_digits import Net, evaluate, load_data  # noqa: E402


def mean_over_ranks(value):
    return hvd.allreduce(torch.tensor(float(value), dtype=torch.float64), name=None).item()


def digits_options(args, steps_per_epoch):
    return [
        ("sync", {}, None),
        ("sharded", {"shard_optimizer_state": True}, None),
        ("powersgd r=2", {"compression": hvd.Compression.powersgd(rank=2,
                                                                  start_step=steps_per_epoch)},
         lambda opt, shapes: opt._reducer.expected_bytes_sent(shapes, 4, hvd.size())),
        (f"topk {args.topk_ratio:.0%}", {"compression": hvd.Compression.topk(args.topk_ratio)},
         lambda opt, shapes: opt._reducer.expected_bytes_sent(shapes, 4, hvd.size())),
        (f"topk {args.topk_ratio:.0%} warm-up", {"compression": hvd.Compression.topk(
            args.topk_ratio, warmup_steps=args.topk_warmup_epochs * steps_per_epoch)},
         lambda opt, shapes: opt._reducer.expected_bytes_sent(shapes, 4, hvd.size())),
        (f"topk {args.topk_ratio:.0%} DGC", {"compression": hvd.Compression.topk(
            args.topk_ratio, warmup_steps=args.topk_warmup_epochs * steps_per_epoch,
            momentum=0.9), "momentum": 0.0},
         lambda opt, shapes: opt._reducer.expected_bytes_sent(shapes, 4, hvd.size())),
        ("fp16 + error feedback", {"compression": hvd.Compression.fp16(error_feedback=True)},
         lambda opt, shapes: opt._reducer.expected_bytes_sent(shapes, 4, hvd.size())),
        ("local SGD H=4", {"local_steps": 4, "local_sgd_warmup_steps": steps_per_epoch},
         None),
    ]


def train_digits(args, options):
    X_train, y_train, X_test, y_test = load_data(args.seed)
    X_shard, y_shard = X_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]
    steps_per_epoch = (len(X_train) // hvd.size()) // args.batch_size
    total_steps = args.epochs * steps_per_epoch
    torch.manual_seed(args.seed)
    model = Net()
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    options = dict(options)
    momentum = options.pop("momentum", 0.9)     # 0 where the compression applies it
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=momentum),
        named_parameters=model.named_parameters(), **options)
    warmup = min(steps_per_epoch, total_steps // 4)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(
        (s + 1) / warmup, 0.5 * (1 + math.cos(math.pi * min(s, total_steps) / total_steps))))
    generator = torch.Generator().manual_seed(args.seed + hvd.rank())
    sent, seconds, measured_steps = 0, 0.0, 0
    for epoch in range(args.epochs):
        order = torch.randperm(len(X_shard), generator=generator)
        _core.transport_stats(reset=True)
        start = time.perf_counter()
        for step in range(steps_per_epoch):
            idx = order[step * args.batch_size:(step + 1) * args.batch_size]
            opt.zero_grad()
            F.cross_entropy(model(X_shard[idx]), y_shard[idx]).backward()
            opt.step()
            sched.step()
        # Bytes per step after warm-up phases (PowerSGD's start_step, local SGD's warm-up):
        # the last half of training is what the method does in steady state.
        if epoch >= args.epochs // 2:
            seconds += time.perf_counter() - start
            sent += _core.transport_stats()["bytes_sent"]
            measured_steps += steps_per_epoch
    accuracy = evaluate(model, X_test, y_test)
    shapes = [tuple(p.shape) for p in model.parameters()]
    return (opt, shapes, accuracy, mean_over_ranks(sent / measured_steps),
            mean_over_ranks(seconds / measured_steps))


def digits(args):
    steps_per_epoch = (len(load_data(args.seed)[0]) // hvd.size()) // args.batch_size
    rows, base = [], None
    for name, options, promise in digits_options(args, steps_per_epoch):
        if args.only and not any(name.startswith(o) for o in args.only.split(",")):
            continue
        opt, shapes, acc, per_step, step_s = train_digits(args, options)
        base = base or (acc, per_step)
        numel = sum(math.prod(s) for s in shapes)
        plain = round(2 * (hvd.size() - 1) * numel * 4 / hvd.size())
        promised = plain / promise(opt, shapes) if promise else (
            options.get("local_steps", 1))
        row = {"option": name, "ranks": hvd.size(), "accuracy": acc,
               "accuracy_minus_sync_points": 100 * (acc - base[0]),
               "bytes_per_step": per_step, "promised_factor": promised,
               "measured_factor": base[1] / per_step, "step_ms": 1000 * step_s}
        rows.append(row)
        if hvd.rank() == 0:
            print(json.dumps(row) if args.json else
                  f"{name:22s} accuracy {acc:.2%} ({row['accuracy_minus_sync_points']:+.2f} "
                  f"points)  bytes/step {per_step:9.0f}  factor {row['measured_factor']:6.2f}"
                  f" (promised {promised:6.2f})  step {row['step_ms']:.2f} ms", flush=True)
    return rows


def peak_rss_bytes():
    """This process's peak resident memory (VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def memory(args):
    """One configuration per process, so that the peak memory is that configuration's."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 2048))
    params = sum(p.numel() for p in model.parameters())
    opt = hvd.DistributedOptimizer(torch.optim.Adam(model.parameters(), lr=1e-4),
                                   named_parameters=model.named_parameters(),
                                   **({"shard_optimizer_state": True,
                                       "bucket_bytes": int(args.bucket_mb * 2**20)}
                                      if args.sharded else {}))
    x = torch.randn(16, 4096)
    for _ in range(3):
        opt.zero_grad()
        model(x).square().mean().backward()
        opt.step()
    state = sum(v.numel() * v.element_size() for st in opt.state.values()
                for v in st.values() if torch.is_tensor(v))
    state = hvd.allreduce(torch.tensor(float(state)), op=hvd.Max).item()
    peak = hvd.allreduce(torch.tensor(float(peak_rss_bytes())), op=hvd.Max).item()
    row = {"ranks": hvd.size(), "parameters": params, "sharded": args.sharded,
           "bucket_mb": args.bucket_mb if args.sharded else None,
           "adam_state_bytes_per_rank": state, "peak_rss_bytes_per_rank": peak}
    if hvd.rank() == 0:
        print(json.dumps(row) if args.json else
              f"{hvd.size()} ranks, {params / 1e6:.1f} M parameters, "
              f"{f'sharded ({args.bucket_mb:g} MiB buckets)' if args.sharded else 'unsharded'}: "
              f"Adam state per rank "
              f"{state / 2**20:.1f} MiB, peak resident memory per rank {peak / 2**20:.0f} MiB",
              flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["digits", "memory"])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--topk-ratio", type=float, default=0.05)
    parser.add_argument("--topk-warmup-epochs", type=int, default=2,
                        help="the warm-up of 'topk warm-up' (Compression.topk(warmup_steps=))")
    parser.add_argument("--only", default="", help="comma-separated option name prefixes")
    parser.add_argument("--sharded", action="store_true", help="memory: shard the state")
    parser.add_argument("--bucket-mb", type=float, default=25.0, help="memory: bucket size")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    hvd.init()
    digits(args) if args.what == "digits" else memory(args)
    hvd.shutdown()


if __name__ == "__main__":
    main()
