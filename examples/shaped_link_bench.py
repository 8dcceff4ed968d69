"""Step time of synchronous SGD, PowerSGD, top-k and local SGD over a bandwidth-limited link.

On this one machine, as root: two hosts made of network namespaces joined by a veth link that
tbf shapes to ``--rate`` (tests/multihost/hosts.py builds them), one rank on each::

    python examples/shaped_link_bench.py --two-hosts --rate 100mbit

On two real hosts::

    hvdlite-run -np 2 -H host1:1,host2:1 python examples/shaped_link_bench.py

The model is communication-heavy on purpose (an MLP of 1024-wide layers, about 3.2 M
parameters, 12.6 MB of float32 gradients, small batches), so that sending the gradients is
most of a synchronous step once the link is slow. Within one job every option trains the same
model from the same start for ``--steps`` steps after ``--warmup`` untimed ones; rank 0 prints,
per option, the mean step time (local SGD's averaging steps included), its ratio to
synchronous SGD measured in the same run (below 1: faster), and the bytes each rank sent
per step (the core's transport counters).
"""
import argparse
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def options(hvd):
    return [("sync", {}),
            ("powersgd r=4", {"compression": hvd.Compression.powersgd(rank=4)}),
            ("topk 1%", {"compression": hvd.Compression.topk(0.01)}),
            ("fp16 + error feedback", {"compression": hvd.Compression.fp16(error_feedback=True)}),
            ("local SGD H=4", {"local_steps": 4})]


def bench(args):
    import torch
    torch.set_num_threads(1)
    import hvdlite.torch as hvd
    from hvdlite import _core

    hvd.init()
    width, depth, batch = args.width, 3, args.batch
    rows, base = [], None
    gen = torch.Generator().manual_seed(hvd.rank())
    x = torch.randn(batch, width, generator=gen)
    y = torch.randint(0, 10, (batch,), generator=gen)
    for name, kwargs in options(hvd):
        torch.manual_seed(0)
        layers = []
        for _ in range(depth):
            layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
        model = torch.nn.Sequential(*layers, torch.nn.Linear(width, 10))
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01,
                                                       momentum=0.9),
                                       named_parameters=model.named_parameters(), **kwargs)
        def steps(n):
            for _ in range(n):
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                opt.step()

        steps(args.warmup)
        hvd.barrier()
        _core.transport_stats(reset=True)
        start = time.perf_counter()
        steps(args.steps)       # a multiple of H: local SGD's averaging steps count too
        hvd.barrier()
        seconds = time.perf_counter() - start
        sent = _core.transport_stats()["bytes_sent"] / args.steps
        step_ms = 1000 * seconds / args.steps
        base = base or step_ms
        row = {"option": name, "step_ms": step_ms, "ratio_to_sync": step_ms / base,
               "bytes_per_step": sent,
               "parameters": sum(p.numel() for p in model.parameters())}
        rows.append(row)
        if hvd.rank() == 0:
            print(json.dumps(row) if args.json else
                  f"{name:22s} step {step_ms:8.1f} ms  x{row['ratio_to_sync']:.2f} of sync  "
                  f"bytes/step {sent:12.0f}", flush=True)
    hvd.shutdown()
    return rows


def two_hosts(args):
    """Builds two namespace hosts on this machine and runs the benchmark across them."""
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from multihost.hosts import namespaces_unavailable_reason, two_hosts as make_hosts
    reason = namespaces_unavailable_reason()
    if reason:
        raise SystemExit(reason)
    from hvdlite import mpi_library
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    with make_hosts(rate=args.rate or None) as cluster:
        argv = [mpi_library.launcher_program(mpi_library.load()["library"]), "-np", "2", "-H",
                ",".join(f"{n}:1" for n in cluster.names), "--bind-to", "none",
                sys.executable, os.path.abspath(__file__), "--steps", str(args.steps),
                "--warmup", str(args.warmup), "--width", str(args.width),
                "--batch", str(args.batch)] + (["--json"] if args.json else [])
        proc = cluster.run(cluster.names[0], argv, timeout=args.timeout, env=env)
        sys.stdout.write(proc.stdout)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-5000:])
            raise SystemExit(proc.returncode)
        print(f"(two namespace hosts, link {args.rate or 'unshaped'}, one rank each)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--two-hosts", action="store_true",
                        help="build two namespace hosts on this machine (root) and run across them")
    parser.add_argument("--rate", default="100mbit",
                        help="--two-hosts: tbf rate of the link ('' for none)")
    parser.add_argument("--timeout", type=int, default=900, help="--two-hosts: hard limit, seconds")
    args = parser.parse_args()
    if args.two_hosts:
        two_hosts(args)
    else:
        bench(args)


if __name__ == "__main__":
    main()
