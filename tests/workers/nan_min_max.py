"""Min and Max propagate NaN (Note [NaN in Min and Max] in csrc/algorithms/reduce.cc), at any
rank count, through whichever all-reduce path the job's shape and each tensor's size pick:
the merged 2-rank round, the exchange, the ring and shared memory at 2 ranks on one host (sizes
below), the ring at 3 and 4, the hierarchical
all-reduce when imported by core_hierarchical.py; the fp16 wire (Compression.fp16); and the
reduce-scatter. In float32, float64, float16 and bfloat16: NaN exactly where some rank had one,
the min/max elsewhere, and the same bits on every rank.

Rank k puts NaN in the elements p with (p + shift) % (N + 1) == k, so each call has NaNs from
every rank in every rank's segment, next to elements without any, and the N + 1 shifts put a
NaN from each rank in every element. Each rank's NaNs have their own sign and payload.
"""
import numpy as np
import torch

torch.set_num_threads(1)

import hvdlite as hv  # noqa: E402
import hvdlite.torch as hvd  # noqa: E402
from hvdlite.policy import reducescatter_rows  # noqa: E402

# A NaN per rank: sign and low payload bits from the rank, as the dtype's raw bits.
NAN_BITS = {
    torch.float16: lambda k: (0x8000 if k % 2 else 0) | 0x7E00 | (k + 1),
    torch.bfloat16: lambda k: (0x8000 if k % 2 else 0) | 0x7FC0 | (k + 1),
    torch.float32: lambda k: (0x80000000 if k % 2 else 0) | 0x7FC00000 | (k + 1),
    torch.float64: lambda k: (0x8000000000000000 if k % 2 else 0) | 0x7FF8000000000000 | (k + 1),
}
BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def values(rank, count):
    """Rank `rank`'s numbers: small integers, exact in every dtype and distinct across ranks."""
    return ((rank * 7 + np.arange(count) * 3) % 11 - 5).astype(np.float64)


def inputs(rank, count, dtype, shift, n):
    x = torch.from_numpy(values(rank, count)).to(dtype)
    nan = (np.arange(count) + shift) % (n + 1) == rank
    bits, width = NAN_BITS[dtype](rank), 8 * x.element_size()
    if bits >= 1 << (width - 1):
        bits -= 1 << width  # as the signed integer of the same width
    raw = x.view(BITS[x.element_size()])
    raw[torch.from_numpy(nan)] = bits
    return x


def expected(count, shift, n, op):
    """(NaN mask, the min/max elsewhere) over all ranks' inputs."""
    nan = (np.arange(count) + shift) % (n + 1) < n
    stacked = np.stack([values(r, count) for r in range(n)])
    return nan, stacked.max(0) if op == hv.Max else stacked.min(0)


def same_bits_everywhere(y, what):
    raw = y.contiguous().view(BITS[y.element_size()]).numpy().reshape(1, -1)
    everyone = hv.allgather(raw, name="nan.bits")
    for r in range(len(everyone)):
        assert np.array_equal(everyone[r], everyone[0]), f"{what}: rank {r}'s bits differ from rank 0's"


def check(y, nan, want, what, everywhere=True):
    """y: NaN where `nan`, `want` elsewhere; with `everywhere`, the same bits on every rank."""
    got = y.double().numpy()
    wrong = np.flatnonzero(np.isnan(got) != nan)
    assert wrong.size == 0, (f"{what}: element {wrong[0]} is {got[wrong[0]]}, expected "
                             f"{'NaN' if nan[wrong[0]] else 'a number'} ({wrong.size} wrong)")
    assert np.array_equal(got[~nan], want[~nan]), f"{what}: the numbers are wrong"
    if everywhere:
        same_bits_everywhere(y, what)


def run(sizes):
    """Every dtype, Min and Max, every shift, at each size (the size picks the path)."""
    n, r = hvd.size(), hvd.rank()
    calls = 0
    for count in sizes:
        for dtype in NAN_BITS:
            for op in (hv.Max, hv.Min):
                opname = "max" if op == hv.Max else "min"
                for shift in range(n + 1):
                    nan, want = expected(count, shift, n, op)
                    what = f"{n} ranks, {count} x {dtype}, {opname}, shift {shift}"
                    # The same name at every shift: repeats take the cached (at 2 ranks, merged) path.
                    reduced = hvd.allreduce(inputs(r, count, dtype, shift, n), op=op,
                                            name=f"nan.{count}.{dtype}.{opname}")
                    check(reduced, nan, want, what)
                    if dtype == torch.float32:  # float32 reduced as fp16 on the wire
                        y = hvd.allreduce(inputs(r, count, dtype, shift, n), op=op,
                                          compression=hvd.Compression.fp16,
                                          name=f"nan.fp16wire.{count}.{opname}")
                        check(y, nan, want, what + " over the fp16 wire")
                    # Reduce-scatter of the same data as rows of 1: this rank's block, with the
                    # bits the all-reduce gave every rank.
                    rows = [reducescatter_rows(count, n, k) for k in range(n)]
                    y = hvd.reducescatter(inputs(r, count, dtype, shift, n), op=op,
                                          name=f"nan.rs.{count}.{dtype}.{opname}")
                    block = slice(sum(rows[:r]), sum(rows[:r + 1]))
                    check(y, nan[block], want[block], "reducescatter " + what, everywhere=False)
                    bits = BITS[y.element_size()]
                    assert torch.equal(y.view(bits), reduced[block].view(bits)), \
                        f"reducescatter {what}: other bits than the all-reduce's"
                    calls += 1
    return calls


if __name__ == "__main__":
    hvd.init()
    N = hvd.size()
    # At 2 ranks (run with HVDLITE_EXCHANGE_MAX_BYTES=1024, HVDLITE_SHM_ALLREDUCE_MIN_BYTES=262144):
    # 7 elements take the merged round when cached (else the exchange), 20000 the ring (40 to
    # 160 KB), 140000 shared memory (280 KB and up). At 3 and 4 ranks every size takes the
    # ring. Every size is at least N, so every rank gets rows from the reduce-scatter.
    sizes = [7, 20000, 140000] if N == 2 else [7, 5000]
    calls = run(sizes)
    print(f"nan_min_max OK at {N} ranks ({calls} cases)", flush=True)
