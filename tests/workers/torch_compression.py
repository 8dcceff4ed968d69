"""Stateful compression (PowerSGD, top-k, 16-bit casts with error feedback).

Checks, at any size:
- PowerSGD is exact on gradients whose column spaces lie in one rank-r space;
- error feedback loses nothing: after T steps, the sum of the reduced gradients plus the
  ranks' mean error buffer equals the sum of the ranks' mean gradients (every method);
- bytes sent per step, measured by the core's transport counters, are what each method
  promises (and fall by its factor against the uncompressed all-reduce);
- DistributedOptimizer with each compression trains, keeps ranks identical, and saves and
  restores its compression state with the optimizer.
Prints "torch_compression OK at N ranks".
"""
import numpy as np
import torch

torch.set_num_threads(1)

import hvdlite as hv  # noqa: E402
import hvdlite.torch as hvd  # noqa: E402
from hvdlite import _core  # noqa: E402
from hvdlite.algorithms.error_feedback import CastReducer, GradientReducer, TopKReducer  # noqa: E402
from hvdlite.algorithms.powersgd import PowerSGDReducer  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
rng = np.random.default_rng(100 + R)
SHAPES = [(64, 48), (32, 3, 3, 3), (40,), (200, 10)]


def mean_over_ranks(a):
    return hv.allreduce(np.ascontiguousarray(a, dtype=np.float64), op=hv.Average)


def powersgd_exact_on_low_rank():
    shared = np.random.default_rng(5).standard_normal((30, 2))     # same column space
    m = shared @ rng.standard_normal((2, 20))
    g = m.astype(np.float32)
    red = PowerSGDReducer(rank=2)
    red.reduce([g], ["w"])
    want = mean_over_ranks(m)
    np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-5)
    assert np.abs(red.errors["w"]).max() < 1e-4


def error_feedback_conserves(make, steps=6):
    red = make()
    grads = [rng.standard_normal(s).astype(np.float32) for s in SHAPES]
    names = [f"t{i}" for i in range(len(SHAPES))]
    total = [np.zeros(s) for s in SHAPES]
    for _ in range(steps):
        work = [g.copy() for g in grads]
        red.reduce(work, names)
        for t, w in zip(total, work):
            t += w
        for w in work[1:]:
            assert hv.allreduce(w.astype(np.float64), op=hv.Max).tolist() == \
                w.astype(np.float64).tolist(), "ranks disagree"
    for t, g, n in zip(total, grads, names):
        err = red.errors.get(n, np.zeros_like(g))
        lhs = t + mean_over_ranks(err)
        rhs = steps * mean_over_ranks(g)
        tol = 2e-2 if isinstance(red, CastReducer) else 1e-4
        np.testing.assert_allclose(lhs, rhs, rtol=tol, atol=tol * np.abs(rhs).max(),
                                   err_msg=f"{type(red).__name__} {n}")
    return red


def topk_momentum_correction():
    """Top-k with momentum correction: a tensor that goes whole sends its momentum, which
    averages to momentum SGD's; a compressed one conserves the sum of its momenta."""
    red = TopKReducer(0.5, momentum=0.9)
    gs = [rng.standard_normal(3) for _ in range(3)]      # k=2 pairs per rank >= 3: whole
    u = np.zeros(3)
    for g in gs:
        work = [g.copy()]
        red.reduce(work, ["whole"])
        u = 0.9 * u + g
        np.testing.assert_allclose(work[0], mean_over_ranks(u), rtol=1e-12)
    red = TopKReducer(0.1, momentum=0.9)
    g = rng.standard_normal(100)
    total, u_sum = np.zeros(100), np.zeros(100)
    for _ in range(4):
        work = [g.copy()]
        red.reduce(work, ["sparse"])
        total += work[0]
    # Without masking the accumulated momenta would be 4g(1 + .9 + ...); with it, what was
    # sent plus what is left (error) is at most that, and nothing is lost from the error.
    left = mean_over_ranks(red.errors["sparse"])
    assert np.all(np.abs(total + left) <= mean_over_ranks(np.abs(g)) * 4 / (1 - 0.9) + 1e-9)
    assert "velocity.sparse" in red.state_dict(R, N)


def measured_bytes(red, names, grads):
    _core.transport_stats(reset=True)
    red.reduce(grads, names)
    return _core.transport_stats()["bytes_sent"]


def bytes_as_promised():
    names = [f"b{i}" for i in range(len(SHAPES))]
    rows = []
    base = None
    for red in (GradientReducer(), PowerSGDReducer(rank=2), TopKReducer(0.02),
                CastReducer("fp16")):
        red.reduce([rng.standard_normal(s).astype(np.float32) for s in SHAPES], names)  # warm
        got = measured_bytes(red, names, [rng.standard_normal(s).astype(np.float32)
                                          for s in SHAPES])
        want = red.expected_bytes_sent(SHAPES, 4, N)
        # The ring splits buffers into N near-equal segments: a few bytes either way.
        assert abs(got - want) <= 8 * N * 4, (type(red).__name__, got, want)
        base = base or got
        rows.append((type(red).__name__, got, want, base / got))
    if R == 0:
        for name, got, want, factor in rows:
            print(f"bytes {name}: sent {got} (promised {want}), {factor:.2f}x fewer than "
                  f"uncompressed", flush=True)


def optimizer_round_trip():
    for comp in (hvd.Compression.powersgd(rank=1, start_step=2), hvd.Compression.topk(0.1),
                 hvd.Compression.fp16(error_feedback=True),
                 hvd.Compression.bf16(error_feedback=True)):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 3))
        opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1,
                                                       momentum=0.9),
                                       named_parameters=model.named_parameters(),
                                       compression=comp)
        g = torch.Generator().manual_seed(R)
        for _ in range(4):
            opt.zero_grad()
            model(torch.randn(8, 12, generator=g)).square().mean().backward()
            opt.step()
        for p in model.parameters():
            top = hvd.allreduce(p.detach(), op=hvd.Max)
            assert torch.equal(top, p.detach()), f"{comp}: ranks disagree"
        sd = opt.state_dict()
        saved = sd["hvdlite_compression"]
        assert saved["step"] == 4 and any(k.startswith("error.") for k in saved), saved.keys()
        opt2 = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1,
                                                        momentum=0.9),
                                        named_parameters=model.named_parameters(),
                                        compression=comp)
        opt2.load_state_dict(sd)
        assert opt2._reducer.step == 4
        for k, v in opt._reducer.errors.items():
            np.testing.assert_array_equal(opt2._reducer.errors[k], v)
        if isinstance(opt._reducer, PowerSGDReducer):
            assert opt2._reducer.qs.keys() == opt._reducer.qs.keys() and opt._reducer.qs
        if R == 0:
            print(f"optimizer {comp}: trained, state saved and restored", flush=True)


powersgd_exact_on_low_rank()
topk_momentum_correction()
for make in (lambda: PowerSGDReducer(rank=2), lambda: TopKReducer(0.05),
             lambda: CastReducer("fp16"), lambda: CastReducer("bf16")):
    red = error_feedback_conserves(make)
    if R == 0:
        print(f"error feedback {type(red).__name__}: nothing lost", flush=True)
bytes_as_promised()
optimizer_round_trip()
if R == 0:
    print(f"torch_compression OK at {N} ranks", flush=True)
hvd.shutdown()
