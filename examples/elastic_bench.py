"""Elastic training's costs: ``state.commit()``, and each membership change.

    hvdlite-run -np 2 --min-np 1 python examples/elastic_bench.py [--sharded]
    python examples/elastic_bench.py --events [--sharded] [--runs 2]

Commit (the first form). For the digits MLP (2.4 k parameters) and a 25 M-parameter MLP
(5000x5000 + 5000x10, SGD with momentum), prints the median time of commit() (copies of the
model's and the optimizer's state plus the host-update check, one small broadcast), of one
training step (forward, backward, all-reduce, update) measured in the same run, and their
ratio (commit / step: below 1 means a commit costs less than a step). With ``--sharded`` the
optimizer shards its state, and a commit gathers the whole state onto every rank (a lost
rank's shard is gone otherwise).

Events (``--events``). Starts ``hvdlite-run -np 2 --min-np 1 --max-np 3`` with a discovery
script of its own on the torch digits MLP, and in one job:
- add: rank 0 lists a third slot (localhost:2 -> localhost:3); a new rank starts, joins at
  the next commit and receives the state;
- remove: rank 0 lists two slots again; the highest rank leaves at the next commit;
- loss: rank 1 SIGKILLs itself; the survivor rebuilds alone and rolls back to the last commit.
For each, the time from the event (the discovery output rewritten, or the kill) to the first
step completed at the new size, and the part of it from the commit that applied the change
(add/remove: the rest is hvdlite-run's one-second poll of the script). A rank the job adds
starts Python and imports torch first: on a loaded machine that dominates "add".
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

COMMIT_EVERY = 5
STEPS = 60
EVENTS = {10: "add", 25: "remove", 42: "loss"}   # step -> the event rank 0 (or 1) makes then


def measure(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def distributed(hvd, model, sharded):
    import torch
    return hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                    named_parameters=model.named_parameters(),
                                    shard_optimizer_state=sharded)


def commit_bench(sharded):
    import torch
    import hvdlite.torch as hvd
    torch.set_num_threads(1)
    hvd.init()

    def bench(name, model, inputs, classes, repeats):
        optimizer = distributed(hvd, model, sharded)
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
        save_s = measure(state.save, repeats)   # the copies alone, without the host check
        params = sum(p.numel() for p in model.parameters())
        if hvd.rank() == 0:
            print(f"{name}{' (sharded state)' if sharded else ''}: {params / 1e6:.3f} M "
                  f"parameters, {hvd.size()} ranks: commit {commit_s * 1e3:.2f} ms (copies "
                  f"{save_s * 1e3:.2f} ms), step {step_s * 1e3:.2f} ms, commit/step "
                  f"{commit_s / step_s:.2f}", flush=True)

    bench("digits MLP", torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Tanh(),
                                            torch.nn.Linear(32, 10)), 64, 10, 50)
    bench("25M MLP", torch.nn.Sequential(torch.nn.Linear(5000, 5000), torch.nn.ReLU(),
                                         torch.nn.Linear(5000, 10)), 5000, 10, 5)


def change_hosts(hosts_path, hosts):
    """Rewrite what the discovery script prints; wait until hvdlite-run has read it."""
    from hvdlite.contract import membership
    seen = membership.read_hosts().version
    with open(hosts_path + ".tmp", "w") as f:
        f.write(hosts + "\n")
    os.replace(hosts_path + ".tmp", hosts_path)
    deadline = time.time() + 60
    while membership.read_hosts().version == seen:
        if time.time() > deadline:
            raise RuntimeError("hvdlite-run did not read the new hosts in 60 s")
        time.sleep(0.02)


def events_worker(hosts_path, out, sharded):
    """One elastic job: the events of EVENTS; rank 0 writes their times to ``out``."""
    import torch
    from sklearn.datasets import load_digits
    import hvdlite.torch as hvd
    from hvdlite.contract import elastic_env as settings
    torch.set_num_threads(1)
    hvd.init()
    added = settings.added_worker_id()
    first_rank = added if added is not None else hvd.rank()
    x, y = load_digits(return_X_y=True)
    x, y = torch.tensor(x / 16.0, dtype=torch.float32), torch.tensor(y)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Tanh(), torch.nn.Linear(32, 10))
    optimizer = distributed(hvd, model, sharded)
    state = hvd.elastic.TorchState(model, optimizer, step=0)
    clock = out + ".event"          # the event's time, written by the rank that makes it
    timing = {"pending": None, "results": []}

    def on_reset():
        timing["pending"] = hvd.size()

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        while state.step < STEPS:
            event = EVENTS.get(state.step)
            if event in ("add", "remove") and first_rank == 0 and \
                    not os.path.exists(f"{clock}.{event}"):
                with open(f"{clock}.{event}", "w") as f:
                    f.write(repr(time.time()))
                change_hosts(hosts_path, "localhost:3" if event == "add" else "localhost:2")
            if event == "loss" and first_rank == 1:
                with open(f"{clock}.loss", "w") as f:
                    f.write(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            n, r = hvd.size(), hvd.rank()
            rows = (torch.arange(16 * n) + state.step * 64) % len(x)
            mine = rows[r * 16:(r + 1) * 16]
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(model(x[mine]), y[mine]).backward()
            optimizer.step()
            state.step += 1
            if timing["pending"] is not None and hvd.rank() == 0:
                done = time.time()
                kind = {3: "add", 1: "loss"}.get(timing["pending"], "remove")
                with open(f"{clock}.{kind}") as f:
                    since_event = done - float(f.read())
                since_commit = done - timing.get("commit_started", done)
                timing["results"].append({"event": kind, "size": timing["pending"],
                                          "event_to_step_s": since_event,
                                          "commit_to_step_s": since_commit})
            timing["pending"] = None
            if state.step % COMMIT_EVERY == 0:
                timing["commit_started"] = time.time()
                state.commit()

    train(state)
    if hvd.rank() == 0:
        with open(out, "w") as f:
            json.dump(timing["results"], f)


def run_events(sharded, runs):
    here = os.path.abspath(__file__)
    for run in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            hosts_path, out = os.path.join(tmp, "hosts"), os.path.join(tmp, "times.json")
            with open(hosts_path, "w") as f:
                f.write("localhost:2\n")
            script = os.path.join(tmp, "hosts.sh")
            with open(script, "w") as f:
                f.write(f"#!/bin/sh\ncat {hosts_path}\n")
            os.chmod(script, 0o755)
            env = dict(os.environ, OMP_NUM_THREADS="1")
            cmd = ["timeout", "--kill-after=10", "600", sys.executable, "-m", "hvdlite.runner",
                   "-np", "2", "--min-np", "1", "--max-np", "3", "--host-discovery-script",
                   script, sys.executable, here, "--worker", hosts_path, out] + (
                       ["--sharded"] if sharded else [])
            started = time.time()
            proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
            if proc.returncode != 0 or not os.path.exists(out):
                sys.exit(f"elastic_bench: the job failed (exit {proc.returncode})\n"
                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
            with open(out) as f:
                results = json.load(f)
        print(f"run {run + 1}{' (sharded state)' if sharded else ''}, job "
              f"{time.time() - started:.1f} s:", flush=True)
        for r in results:
            print(f"  {r['event']:>6}: event -> first step at {r['size']} rank"
                  f"{'s' if r['size'] != 1 else ''}: {r['event_to_step_s']:.3f} s "
                  f"(from the commit that applied it: {r['commit_to_step_s']:.3f} s)"
                  if r["event"] != "loss" else
                  f"  {r['event']:>6}: rank killed -> first step at {r['size']} rank: "
                  f"{r['event_to_step_s']:.3f} s", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sharded", action="store_true",
                        help="shard the optimizer state (shard_optimizer_state=True)")
    parser.add_argument("--events", action="store_true",
                        help="time adding, removing and losing a rank (launches its own job)")
    parser.add_argument("--runs", type=int, default=1, help="jobs for --events")
    parser.add_argument("--worker", nargs=2, metavar=("HOSTS", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        events_worker(*args.worker, args.sharded)
    elif args.events:
        run_events(args.sharded, args.runs)
    else:
        commit_bench(args.sharded)


if __name__ == "__main__":
    main()
