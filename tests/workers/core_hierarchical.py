"""All-reduce across hosts: exact results by the flat ring's rules (Sum, Average by the job's
size, Max; fp16 reduced in fp32), bitwise identical on every rank, NaN kept by Min and Max, and the bytes this host
sent over its link to the other hosts during one 16 MiB all-reduce, read from the kernel's
counters (/proc/net/dev). Run by tests/test_hierarchical_multihost.py on two and three hosts.
"""
import importlib.util

import numpy as np

import hvdlite as hvd


def link_tx_bytes():
    """Bytes this host has sent to the others: over its veth link, or, on the host that holds
    the switch (three or more hosts), over the bridge its address is on."""
    counters = {}
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, fields = line.partition(":")
            if fields:
                counters[name.strip()] = int(fields.split()[8])  # 8 receive fields, then tx bytes
    for device in ("br0", "veth0"):
        if device in counters:
            return counters[device]
    raise RuntimeError(f"neither br0 nor veth0 in /proc/net/dev: {sorted(counters)}")


def same_on_every_rank(x):
    rows = hvd.allgather(np.ascontiguousarray(x).view(np.uint8).reshape(1, -1))
    return all(np.array_equal(rows[0], row) for row in rows)


hvd.init()
R, N = hvd.rank(), hvd.size()
from hvdlite import _core
algorithm = "hierarchical" if _core.hierarchical_allreduce_active() else "flat ring"
print(f"rank {R}: local {hvd.local_rank()}/{hvd.local_size()} cross {hvd.cross_rank()}/{hvd.cross_size()}"
      f" all-reduce: {algorithm}", flush=True)

for count in (1, 3, 1001, 100003):
    base = np.arange(count) % 13
    for dtype in (np.float32, np.float64, np.int32, np.float16):
        x = (base + R).astype(dtype)
        total = hvd.allreduce(x, op=hvd.Sum, name=f"sum.{count}.{np.dtype(dtype).name}")
        assert np.array_equal(total, (N * base + N * (N - 1) // 2).astype(dtype)), (count, dtype)
        assert same_on_every_rank(total)
        biggest = hvd.allreduce(x, op=hvd.Max, name=f"max.{count}.{np.dtype(dtype).name}")
        assert np.array_equal(biggest, (base + N - 1).astype(dtype))
    # Average of random floats: not exact, but bitwise identical everywhere and close.
    rng = np.random.default_rng(R)
    y = rng.standard_normal(count).astype(np.float32)
    avg = hvd.allreduce(y, op=hvd.Average, name=f"avg.{count}")
    assert same_on_every_rank(avg)
    everyone = hvd.allgather(y.reshape(1, -1))
    assert np.allclose(avg, everyone.mean(axis=0), rtol=1e-5, atol=1e-6)

# Min and Max propagate NaN from any rank, in every floating dtype (nan_min_max.py, with torch;
# the other MPIs' environments have no torch, and tests/torch must not pass for it).
_torch = importlib.util.find_spec("torch")
if _torch is not None and _torch.origin not in (None, "namespace"):
    import nan_min_max  # noqa: E402
    print(f"rank {R}: {nan_min_max.run([7, 30000])} NaN cases", flush=True)

big = np.ones(4 << 20, np.float32)  # 16 MiB
hvd.allreduce(big, op=hvd.Sum, name="warm")
hvd.barrier()
before = link_tx_bytes()
out = hvd.allreduce(big, op=hvd.Sum, name="measured")
hvd.barrier()
sent = link_tx_bytes() - before
assert (out == N).all()
if hvd.local_rank() == 0:
    print(f"host of rank {R}: sent {sent} bytes across hosts for a {big.nbytes}-byte all-reduce",
          flush=True)
print(f"rank {R}: ALL OK", flush=True)
