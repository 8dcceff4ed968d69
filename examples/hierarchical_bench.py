"""Across hosts: raw MPI against hvdlite's flat ring, its hierarchical all-reduce and its
automatic choice, per size, with the bytes each sends across hosts counted by the kernel (not
computed). Also ``examples/allreduce_bench.py --two-hosts``.

On real hosts (2 ranks or more on each; --device is the network device between them)::

    hvdlite-run -np 4 -H host1:2,host2:2 python examples/hierarchical_bench.py --device eth0

On this one machine, as root, with two hosts made of network namespaces joined by a veth link
shaped by tbf (tests/multihost/hosts.py builds them)::

    python examples/hierarchical_bench.py --two-hosts --rate 10gbit
    python examples/hierarchical_bench.py --two-hosts --rate '' --delay-ms 1 --sizes 4K 64K

Each of --rounds rounds has four phases, their order reversed from one round to the next so
that load from elsewhere hits all alike: raw MPI (mpi4py's in-place Allreduce, timed while
hvdlite is not initialised, when mpi4py is there), then hvdlite initialised with
HVDLITE_HIERARCHICAL_ALLREDUCE=0 (flat ring), =1 (hierarchical) and unset (the automatic
choice), re-initialised in between. A time is the median of all of a rank's timed calls, then
the largest over the ranks. Rank 0 prints per size the times, the ratios (above 1: the
denominator is faster) and the bytes each host sent over its link per all-reduce; the
automatic choice's bytes show which algorithm it picked.
"""
import argparse
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KiB, MiB = 1 << 10, 1 << 20
SIZES = [4 * KiB, 64 * KiB, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB]
# (key, HVDLITE_HIERARCHICAL_ALLREDUCE or None for unset); "mpi" is not hvdlite.
PHASES = [("mpi", None), ("flat", "0"), ("hier", "1"), ("auto", None)]


def link_tx_bytes(device):
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, counters = line.partition(":")
            if name.strip() == device:
                return int(counters.split()[8])   # receive has 8 fields, then transmit bytes
    raise SystemExit(f"no network device {device!r} in /proc/net/dev (pass --device)")


def iterations(nbytes):
    """Timed calls per size and phase, the same on every rank."""
    return int(max(5, min(40, (256 * MiB) // nbytes)))


def time_calls(allreduce, barrier, nbytes, device):
    """A rank's call times and the bytes its host's link sent per call (counted on every rank,
    used from local rank 0)."""
    for _ in range(2):
        allreduce()
    n = iterations(nbytes)
    barrier()
    before = link_tx_bytes(device)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        allreduce()
        times.append(time.perf_counter() - start)
    barrier()
    return times, (link_tx_bytes(device) - before) / n


def bench(args):
    import numpy as np
    try:
        if "mpi" not in args.phases:
            raise ImportError("not asked for")
        from mpi4py import MPI   # initialises MPI before hvdlite (hvdlite then leaves it alone)
    except ImportError as e:
        MPI = None
        print(f"(no raw MPI column: {e})", file=sys.stderr)
    import hvdlite as hvd

    sizes = args.sizes or SIZES
    times = {(k, n): [] for k, _ in PHASES for n in sizes}
    sent = {(k, n): [] for k, _ in PHASES for n in sizes}
    local_rank = None

    def mpi_phase():
        comm = MPI.COMM_WORLD
        for nbytes in sizes:
            x = np.ones(nbytes // 4, np.float32)
            t, s = time_calls(lambda: comm.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM), comm.Barrier,
                              nbytes, args.device)
            times["mpi", nbytes] += t
            sent["mpi", nbytes].append(s)

    def hvdlite_phase(key, setting):
        nonlocal local_rank
        if setting is None:
            os.environ.pop("HVDLITE_HIERARCHICAL_ALLREDUCE", None)
        else:
            os.environ["HVDLITE_HIERARCHICAL_ALLREDUCE"] = setting
        hvd.init()
        if hvd.local_size() < 2 or hvd.cross_size() < 2:
            raise SystemExit("needs at least 2 hosts with at least 2 ranks each")
        local_rank = hvd.local_rank()
        for nbytes in sizes:
            x = np.ones(nbytes // 4, np.float32)
            name = f"bench.{nbytes}"
            t, s = time_calls(lambda: hvd.allreduce_(x, op=hvd.Sum, name=name), hvd.barrier,
                              nbytes, args.device)
            times[key, nbytes] += t
            sent[key, nbytes].append(s)
        hvd.barrier()
        hvd.shutdown()

    phases = [p for p in PHASES if p[0] in args.phases and (p[0] != "mpi" or MPI is not None)]
    for r in range(args.rounds):
        for key, setting in (phases if r % 2 == 0 else phases[::-1]):
            if key == "mpi":
                mpi_phase()
            else:
                hvdlite_phase(key, setting)

    # Gather: the slowest rank's median, and each host's bytes (from its local rank 0).
    hvd.init()
    keys = [k for k, _ in phases]
    mine = np.array([[float(np.median(times[k, n])) for k in keys] for n in sizes])
    slowest = hvd.allreduce(mine, op=hvd.Max, name="medians")
    mine_sent = np.array([[float(np.mean(sent[k, n])) if local_rank == 0 else 0.0 for k in keys]
                          for n in sizes])
    per_rank = hvd.allgather(mine_sent.reshape(1, len(sizes), len(keys)))
    if hvd.rank() == 0:
        report(args, sizes, keys, slowest, per_rank[per_rank.sum(axis=(1, 2)) > 0])
    hvd.shutdown()


def report(args, sizes, keys, slowest, per_host):
    col = {k: i for i, k in enumerate(keys)}
    has_mpi = "mpi" in col
    head = f"{'size':>7} " + "".join(f"{k + ' ms':>10}" for k in keys)
    has_auto = "auto" in col
    head += (f"{'MPI/flat':>9}{'MPI/hier':>9}" if has_mpi else "") + f"{'flat/hier':>10}"
    head += f"{'auto/best':>10}" if has_auto else ""
    head += "  MB sent across hosts per host: " + " | ".join(keys)
    print(head)
    rows = []
    for i, nbytes in enumerate(sizes):
        t = {k: slowest[i, col[k]] for k in keys}
        best = min(t["flat"], t["hier"])
        line = f"{fmt_size(nbytes):>7} " + "".join(f"{t[k] * 1e3:10.3f}" for k in keys)
        if has_mpi:
            line += f"{t['mpi'] / t['flat']:9.2f}{t['mpi'] / t['hier']:9.2f}"
        line += f"{t['flat'] / t['hier']:10.2f}" + (f"{t['auto'] / best:10.2f}" if has_auto else "") + "  "
        line += " | ".join(" ".join(f"{b / 1e6:.3f}" for b in per_host[:, i, col[k]]) for k in keys)
        print(line)
        rows.append({"bytes": nbytes, "seconds": t,
                     "sent_per_host": {k: [float(b) for b in per_host[:, i, col[k]]] for k in keys}})
    print("(ratios above 1: the second is faster; auto/best near 1: the automatic choice took "
          "the faster one)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


def fmt_size(nbytes):
    return f"{nbytes // MiB}M" if nbytes >= MiB else f"{nbytes // KiB}K"


def parse_size(text):
    """4K, 64M, 1G or a byte count."""
    units = {"K": KiB, "M": MiB, "G": 1 << 30}
    t = text.strip().upper()
    return int(float(t[:-1]) * units[t[-1]]) if t[-1:] in units else int(t)


def two_hosts(args, passthrough):
    """Builds two namespace hosts on this machine and runs the benchmark across them."""
    sys.path.insert(0, os.path.join(REPO, "tests"))
    from multihost.hosts import namespaces_unavailable_reason, two_hosts as make_hosts
    reason = namespaces_unavailable_reason()
    if reason:
        raise SystemExit(reason)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    with make_hosts(rate=args.rate or None, delay_ms=args.delay_ms or None) as cluster:
        hostlist = ",".join(f"{n}:{args.per_host}" for n in cluster.names)
        device = cluster.link_devices(cluster.names[0])[0]
        argv = [sys.executable, "-m", "hvdlite.runner", "--no-prefix",
                "-np", str(args.per_host * len(cluster.names)), "-H", hostlist,
                sys.executable, os.path.abspath(__file__), "--device", device, *passthrough]
        proc = cluster.run(cluster.names[0], argv, timeout=args.timeout, env=env, cwd=REPO)
        sys.stdout.write(proc.stdout)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr[-5000:])
            raise SystemExit(proc.returncode)
        link = args.rate or "unshaped"
        if args.delay_ms:
            how = ("a user-space delay line, no netem here" if cluster.delay_line_ms is not None
                   else "netem")
            link += f", {args.delay_ms} ms one-way delay ({how})"
        print(f"(two namespace hosts, link {link}, {args.per_host} ranks each)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="eth0", help="the network device between the hosts")
    parser.add_argument("--sizes", nargs="+", type=parse_size, metavar="SIZE",
                        help="all-reduce sizes (default 4K 64K 1M 4M 16M 64M)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the four phases")
    parser.add_argument("--phases", default="mpi,flat,hier,auto", type=lambda t: t.split(","),
                        help="which of mpi, flat, hier, auto to run (flat and hier always run)")
    parser.add_argument("--json", help="write the results as JSON to this file (rank 0)")
    parser.add_argument("--two-hosts", action="store_true",
                        help="build two namespace hosts on this machine (root) and run across them")
    parser.add_argument("--rate", default="10gbit", help="--two-hosts: tbf rate of the link ('' for none)")
    parser.add_argument("--delay-ms", type=float, default=0.0,
                        help="--two-hosts: one-way link delay (netem, or a user-space delay line "
                             "where the kernel has no netem: for small sizes only)")
    parser.add_argument("--per-host", type=int, default=2, help="--two-hosts: ranks per host")
    parser.add_argument("--timeout", type=int, default=900, help="--two-hosts: hard limit, seconds")
    args = parser.parse_args(argv)
    args.phases = sorted(set(args.phases) | {"flat", "hier"}, key=[k for k, _ in PHASES].index)
    if args.two_hosts:
        passthrough = ["--rounds", str(args.rounds), "--phases", ",".join(args.phases)]
        if args.sizes:
            passthrough += ["--sizes", *map(str, args.sizes)]
        if args.json:
            passthrough += ["--json", os.path.abspath(args.json)]
        two_hosts(args, passthrough)
    else:
        bench(args)


if __name__ == "__main__":
    main()
