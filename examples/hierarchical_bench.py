"""Flat ring versus hierarchical all-reduce across two hosts, with the bytes each sends
across hosts counted by the kernel (not computed).

On two real hosts (2 ranks each)::

    hvdlite-run -np 4 -H host1:2,host2:2 python examples/hierarchical_bench.py --device eth0

On this one machine, as root, with two hosts made of network namespaces joined by a veth link
shaped to 10 Gbit/s (tests/multihost/hosts.py builds them)::

    python examples/hierarchical_bench.py --two-hosts --rate 10gbit

Within one job it runs every size with HVDLITE_HIERARCHICAL_ALLREDUCE=0 (flat ring), then
again with =1, re-initialising hvdlite in between. Rank 0 prints, per size, the median time of
each, flat/hierarchical time (above 1: hierarchical is faster), and the bytes per all-reduce
that each host sent over its link.
"""
import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]


def link_tx_bytes(device):
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, counters = line.partition(":")
            if name.strip() == device:
                return int(counters.split()[8])
    raise SystemExit(f"no network device {device!r} in /proc/net/dev (pass --device)")


def measure(hvd, np, nbytes, device):
    """Median seconds of one all-reduce of nbytes, and bytes this host sent per all-reduce."""
    x = np.ones(nbytes // 4, np.float32)
    name = f"bench.{nbytes}"
    for _ in range(3):
        hvd.allreduce_(x, op=hvd.Sum, name=name)
    iterations = int(max(3, min(30, (128 << 20) // nbytes)))  # the same on every rank
    hvd.barrier()
    before = link_tx_bytes(device)
    times = []
    for _ in range(iterations):
        start = time.perf_counter()
        hvd.allreduce_(x, op=hvd.Sum, name=name)
        times.append(time.perf_counter() - start)
    hvd.barrier()
    sent = (link_tx_bytes(device) - before) / iterations
    return sorted(times)[iterations // 2], sent


def bench(args):
    import numpy as np
    import hvdlite as hvd
    results = {}
    for mode in ("0", "1"):
        os.environ["HVDLITE_HIERARCHICAL_ALLREDUCE"] = mode
        hvd.init()
        if hvd.local_size() < 2 or hvd.cross_size() < 2:
            raise SystemExit("needs at least 2 hosts with at least 2 ranks each")
        for nbytes in SIZES:
            seconds, sent = measure(hvd, np, nbytes, args.device)
            # The slowest rank's time, and the bytes of every host (local rank 0 counts them).
            seconds = float(hvd.allreduce(np.array([seconds]), op=hvd.Max, name="t")[0])
            mine = np.array([sent if hvd.local_rank() == 0 else 0.0])
            per_host = hvd.allgather(mine)
            results.setdefault(nbytes, {})[mode] = (seconds, [float(b) for b in per_host if b])
        hvd.barrier()
        hvd.shutdown()
    hvd.init()
    if hvd.rank() == 0:
        rows = []
        print(f"{'size':>9} {'flat ms':>9} {'hier ms':>9} {'flat/hier':>9}  bytes sent across hosts "
              f"per host (flat | hierarchical)")
        for nbytes, r in results.items():
            (tf, bf), (th, bh) = r["0"], r["1"]
            print(f"{nbytes >> 10:>7}Ki {tf * 1e3:9.3f} {th * 1e3:9.3f} {tf / th:9.2f}  "
                  f"{' '.join(f'{b:.0f}' for b in bf)} | {' '.join(f'{b:.0f}' for b in bh)}")
            rows.append({"bytes": nbytes, "flat_s": tf, "hierarchical_s": th,
                         "flat_sent_per_host": bf, "hierarchical_sent_per_host": bh})
        if args.json:
            print(json.dumps(rows))
    hvd.shutdown()


def two_hosts(args):
    """Builds two namespace hosts on this machine and runs the benchmark across them."""
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from multihost.hosts import namespaces_unavailable_reason, two_hosts as make_hosts
    reason = namespaces_unavailable_reason()
    if reason:
        raise SystemExit(reason)
    from hvdlite import _core
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    with make_hosts(rate=args.rate) as cluster:
        hostlist = ",".join(f"{n}:{args.per_host}" for n in cluster.names)
        argv = [_core.build_info()["mpirun"], "-np", str(args.per_host * len(cluster.names)),
                "-H", hostlist, "--bind-to", "none", sys.executable, os.path.abspath(__file__),
                "--device", "veth0"]
        if args.json:
            argv.append("--json")
        proc = cluster.run(cluster.names[0], argv, timeout=args.timeout, env=env)
        sys.stdout.write(proc.stdout)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-5000:])
            raise SystemExit(proc.returncode)
        print(f"(two namespace hosts, link {args.rate or 'unshaped'}, {args.per_host} ranks each)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="eth0", help="the network device between the hosts")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--two-hosts", action="store_true",
                        help="build two namespace hosts on this machine (root) and run across them")
    parser.add_argument("--rate", default="10gbit", help="--two-hosts: tbf rate of the link ('' for none)")
    parser.add_argument("--per-host", type=int, default=2, help="--two-hosts: ranks per host")
    parser.add_argument("--timeout", type=int, default=900, help="--two-hosts: hard limit, seconds")
    args = parser.parse_args()
    if args.two_hosts:
        two_hosts(args)
    else:
        bench(args)


if __name__ == "__main__":
    main()
