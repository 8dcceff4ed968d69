"""Adasum through the core (hvdlite's numpy API) against the float64 reference of the
paper's formula (adasum_reference.py): float16, float32 and float64, one tensor at a time and
fused in a group (the fused result equals the unfused one), async, pre/postscale, process
sets, the rank counts Horovod refuses (a clear error on every rank, the job goes on), and
ranks that disagree on the op. Any number of ranks.
"""
import numpy as np

import hvdlite as hvd
from adasum_reference import adasum_tree, relative_error, tolerance
from hvdlite import HvdliteInvalidArgumentError, HvdliteMismatchError, HvdliteUnsupportedError


def expect(exc_type, pattern, fn, *args, **kwargs):
    import re
    try:
        fn(*args, **kwargs)
    except exc_type as e:
        assert re.search(pattern, str(e)), f"message {str(e)!r} does not match {pattern!r}"
        return
    raise AssertionError(f"{fn} did not raise {exc_type.__name__}")


hvd.init(process_sets="dynamic")
R, N = hvd.rank(), hvd.size()
# Sets smaller than the job (a set equal to the job's ranks would duplicate the global one).
pair = hvd.add_process_set([0, 1]) if N > 2 else None
three = hvd.add_process_set([0, 1, 2]) if N > 3 else None
POWER_OF_TWO = N & (N - 1) == 0
EPS = {np.float16: 2.0 ** -10, np.float32: 2.0 ** -23, np.float64: 2.0 ** -52}
SIZES = [1, 7, 1000, 0, 33, 4096]


def everyone(seed, dtype):
    """Every rank's tensors (each rank computes all of them, so the reference is local):
    a part shared by all ranks plus one of each rank's own, so coefficients are far from 1;
    tensor 3 is empty and a zero tensor rides along."""
    rng = np.random.default_rng(seed)
    shared = [rng.normal(size=s) for s in SIZES]
    per_rank = []
    for r in range(N):
        mine = [(shared[k] * (r % 3 + 1) + rng.normal(size=s)).astype(dtype)
                for k, s in enumerate(SIZES)]
        mine.append(np.zeros(5, dtype))
        per_rank.append(mine)
    return per_rank


def check_close(got, per_rank_inputs, dtype, ranks, scale=1.0, what=""):
    want = adasum_tree(per_rank_inputs) * scale
    err = relative_error(got, want)
    assert err <= tolerance(EPS[dtype], ranks), f"{what} {np.dtype(dtype).name}: error {err}"


if POWER_OF_TWO:
    for dtype in (np.float16, np.float32, np.float64):
        data = everyone(7, dtype)
        mine = data[R]
        column = lambda k: [data[r][k] for r in range(N)]  # noqa: E731
        alone = [hvd.allreduce(t, op=hvd.Adasum, name=f"alone.{dtype.__name__}.{k}")
                 for k, t in enumerate(mine)]
        fused = hvd.grouped_allreduce(mine, op=hvd.Adasum, name=f"fused.{dtype.__name__}")
        for k in range(len(mine)):
            assert alone[k].dtype == dtype and alone[k].shape == mine[k].shape
            check_close(alone[k], column(k), dtype, N, what=f"tensor {k} alone")
            check_close(fused[k], column(k), dtype, N, what=f"tensor {k} fused")
            # Note [Adasum per tensor]: fusion changes nothing but the rounding of the dot
            # products' float64 partial sums (their order follows the slices).
            assert relative_error(fused[k], alone[k]) <= tolerance(EPS[dtype], N), (k, dtype)
        assert not fused[-1].any(), "zeros stay zeros"
        # Async, in place, with Horovod's prescale and postscale (applied around Adasum).
        x = mine[2].copy()
        hvd.allreduce_async_(x, op=hvd.Adasum, prescale_factor=2.0, postscale_factor=0.25,
                             name=f"scaled.{dtype.__name__}").wait()
        check_close(x, column(2), dtype, N, scale=0.5, what="scaled")

    # Every rank holds the same bits.
    got = hvd.allreduce(everyone(11, np.float32)[R][2], op=hvd.Adasum, name="bits")
    gathered = hvd.allgather(got[None, :], name="bits.gathered")
    assert all((gathered[r] == got).all() for r in range(N))

    # Orthogonal vectors add; parallel ones average (Horovod's characteristic cases).
    e = np.zeros(max(N, 2))
    e[R] = R + 1.0
    assert np.array_equal(hvd.allreduce(e, op=hvd.Adasum, name="orthogonal"),
                          np.array([r + 1.0 for r in range(N)] + [0.0] * (len(e) - N)))
    v = np.linspace(-1, 1, 9)
    assert np.allclose(hvd.allreduce(v, op=hvd.Adasum, name="parallel"), v, rtol=1e-14)

    # Every rank must agree on Adasum: a mix is a mismatch, named on every rank.
    if N > 1:
        expect(HvdliteMismatchError, "reduce ops.*Adasum", hvd.allreduce, np.ones(3),
               op=hvd.Adasum if R == 0 else hvd.Sum, name="mixed.ops")
else:
    # Horovod's rule: a power of two of ranks. Every rank raises at once, naming the size.
    expect(HvdliteUnsupportedError, f"power-of-two number of ranks.*the job has {N}",
           hvd.allreduce, np.ones(3), op=hvd.Adasum)
    expect(NotImplementedError, f"has {N}", hvd.grouped_allreduce, [np.ones(3)], op=hvd.Adasum)
    expect(NotImplementedError, f"has {N}", hvd.allreduce_async, np.ones(3), op=hvd.Adasum)

# Process sets: the same rule on the set's size.
if pair is not None and pair.included():
    data = everyone(3, np.float64)
    got = hvd.allreduce(data[R][2], op=hvd.Adasum, process_set=pair, name="pair")
    check_close(got, [data[0][2], data[1][2]], np.float64, 2, what="process set of 2")
if three is not None and three.included():
    expect(HvdliteUnsupportedError, f"process set {three.process_set_id} has 3",
           hvd.allreduce, np.ones(2), op=hvd.Adasum, process_set=three)

# Adasum is defined on floating-point tensors, and for all-reduce only.
if POWER_OF_TWO:
    expect(HvdliteInvalidArgumentError, "Adasum reduces float16, bfloat16, float32 and float64",
           hvd.allreduce, np.ones(2, np.int32), op=hvd.Adasum)
expect(HvdliteInvalidArgumentError, "Adasum is an all-reduce only", hvd.reducescatter,
       np.ones(2 * N), op=hvd.Adasum)

# The job goes on.
assert (hvd.allreduce(np.ones(3), op=hvd.Sum, name="after") == N).all()
hvd.shutdown()
print(f"rank {R}: ALL OK")
