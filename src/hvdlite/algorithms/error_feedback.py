"""Gradient compression that keeps state between steps, on numpy arrays (framework-free).

Each reducer takes this rank's gradients (float32 numpy arrays, reduced in place) and
leaves in them the reduced result, the same on every rank. What compression drops from a
gradient is not lost: it is kept in a per-tensor error buffer and added to the next step's
gradient before compressing (error feedback, Seide et al. 2014; Karimireddy et al. 2019),
so over steps every rank's whole gradient gets through.

- :class:`CastReducer`: send as float16/bfloat16 (packed by the core) with error feedback.
- :class:`TopKReducer`: send only the ``ratio`` largest-magnitude entries of each gradient,
  as (index, value) pairs in one all-gather; every rank sums the pairs it receives.
- :class:`hvdlite.algorithms.powersgd.PowerSGDReducer`: low-rank (see that module).

Adapters (torch, Keras) hand gradients over as numpy views and store :meth:`state_dict`
with their optimizer. Error buffers belong to one rank; :meth:`load_state_dict` restores
them only on the rank and size that saved them (elsewhere they restart at zero, which
costs nothing but the not-yet-sent remainder).
"""

import numpy as np

from hvdlite import _core, ops as _ops
from hvdlite.exceptions import HvdliteInvalidArgumentError
from hvdlite.policy import Average, require_average_or_sum


def ring_allreduce_bytes(elements, itemsize, size):
    """Bytes one rank sends in a ring all-reduce of ``elements`` (reduce-scatter + all-gather,
    each passing size - 1 of the size segments on)."""
    return round(2 * (size - 1) * elements * itemsize / size)


class GradientReducer:
    """No compression (the reference the others are measured against); the base class keeps
    error buffers by tensor name, a step counter, and state_dict round trips."""

    def __init__(self):
        self.step = 0
        self.errors = {}
        #: Reduce over this process set (None: all ranks); set before the first step.
        self.process_set = None

    def _set_kw(self):
        return {} if self.process_set is None else {"process_set": self.process_set}

    def set_size(self):
        """The number of ranks the gradients are reduced over."""
        return _core.size() if self.process_set is None else self.process_set.size()

    def reduce(self, grads, names, op=Average, prescale=1.0, postscale=1.0):
        """Reduce ``grads`` (contiguous float numpy arrays) in place across ranks."""
        if len(grads) != len(names):
            raise ValueError(f"{len(grads)} gradients but {len(names)} names")
        for g, n in zip(grads, names):
            if not (isinstance(g, np.ndarray) and g.flags.c_contiguous
                    and g.dtype in (np.float32, np.float64)):
                raise HvdliteInvalidArgumentError(
                    f"{type(self).__name__}: gradient '{n}' must be a contiguous float32 "
                       f"or float64 array, got {getattr(g, 'dtype', type(g).__name__)}")
        require_average_or_sum(op, type(self).__name__)
        self._reduce(grads, [str(n) for n in names], op, float(prescale), float(postscale))
        self.step += 1

    def reduce_with_state(self, grads, names, errors, qs, step, op, prescale, postscale):
        """:meth:`reduce` with the state handed in and back out, for an adapter that keeps
        it in variables of its own (Keras): ``errors`` and ``qs`` map tensor names to
        arrays. Returns (errors, qs, step) after the step; the reducer keeps none of it."""
        self.errors, self.qs, self.step = dict(errors), dict(qs), int(step)
        try:
            self.reduce(grads, names, op, prescale, postscale)
            return self.errors, self.qs, self.step
        finally:
            self.errors, self.qs = {}, {}

    def keeps_error(self, shape, size):
        """Whether a gradient of ``shape`` keeps an error buffer when reduced over ``size``
        ranks."""
        return False

    def initial_q(self, name, shape, dtype):
        """The starting low-rank factor of a gradient of ``shape`` (None: it has none)."""
        return None

    def _reduce(self, grads, names, op, prescale, postscale):
        _ops.wait_all(_ops.grouped_allreduce_async(grads, None, [f"plain.{n}" for n in names],
                                                   op, prescale, postscale, **self._set_kw()))

    def expected_bytes_sent(self, shapes, itemsize, size):
        """Bytes one rank sends per step for gradients of ``shapes`` (the promise that the
        transport counters are checked against)."""
        return ring_allreduce_bytes(sum(int(np.prod(s)) for s in shapes), itemsize, size)

    def _with_error(self, g, name):
        """This step's gradient plus what earlier steps did not send (a new array)."""
        e = self.errors.get(name)
        if e is None or e.shape != g.shape:
            return g.copy()
        return g + e

    #: (key prefix in the state dict, attribute holding {tensor name: array}, whether it
    #: belongs to one rank and restarts empty on another rank or size).
    STATE = (("error", "errors", True),)

    def state_dict(self, rank, size):
        sd = {"step": self.step, "rank": rank, "size": size}
        for prefix, attr, _ in self.STATE:
            sd.update({f"{prefix}.{n}": a for n, a in getattr(self, attr).items()})
        return sd

    def load_state_dict(self, sd, rank, size):
        self.step = int(sd.get("step", 0))
        own = sd.get("rank") == rank and sd.get("size") == size
        for prefix, attr, per_rank in self.STATE:
            setattr(self, attr, {k[len(prefix) + 1:]: np.array(v) for k, v in sd.items()
                                 if (own or not per_rank) and k.startswith(prefix + ".")})


def _round_to(values, wire):
    """``values`` rounded as the core rounds them for ``wire`` (round to nearest even)."""
    if values.dtype == np.float32 and values.flags.c_contiguous:
        out = np.empty_like(values)
        _core.round_through_wire(values, out, wire)   # the core's own conversion, in bulk
        return out
    if wire == "fp16":
        return values.astype(np.float32).astype(np.float16).astype(values.dtype)
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).astype(values.dtype)


class CastReducer(GradientReducer):
    """16-bit floats on the wire (the core packs them), with error feedback."""

    def __init__(self, wire):
        super().__init__()
        if wire not in ("fp16", "bf16"):
            raise ValueError(f"wire must be 'fp16' or 'bf16', got {wire!r}")
        self.wire = wire

    def keeps_error(self, shape, size):
        return True         # every tensor rounds

    def _reduce(self, grads, names, op, prescale, postscale):
        for g, n in zip(grads, names):
            m = self._with_error(g, n)
            # The core scales by prescale, then rounds: the error is what that rounding drops.
            if prescale == 1.0:
                sent = _round_to(m, self.wire)
            else:
                sent = _round_to(m * prescale, self.wire) / prescale
            np.subtract(m, sent, out=sent)
            self.errors[n] = sent
            g[...] = m
        _ops.wait_all(_ops.grouped_allreduce_async(
            grads, None, [f"ef.{self.wire}.{n}" for n in names], op, prescale, postscale,
            self.wire, **self._set_kw()))

    def expected_bytes_sent(self, shapes, itemsize, size):
        return super().expected_bytes_sent(shapes, 2, size)


class TopKReducer(GradientReducer):
    """Top-k sparsification with error feedback, as one all-gather of (index, value) pairs.

    A tensor of n elements sends k = ceil(ratio * n) pairs; it is compressed only when that
    costs less than its all-reduce (k * size < n), else it is all-reduced whole.

    Two remedies of Deep Gradient Compression (Lin et al. 2018) for ratios of a few percent:

    - ``warmup_steps``: over the first steps the ratio falls exponentially from dense to
      ``ratio`` (``ratio ** ((t+1)/(W+1))`` at step t), so the early, fast-changing gradients
      are not starved while the error buffers are still filling.
    - ``momentum`` (momentum correction): the reducer keeps each rank's momentum itself,
      u = momentum * u + g, accumulates u (not g) in the error buffer and selects from that,
      and zeroes u where it sent (momentum factor masking). Tensors that go whole send u,
      which averages to plain momentum SGD exactly. Use it with the optimizer's own momentum
      at 0 (the reducer has already applied it).
    """

    STATE = GradientReducer.STATE + (("velocity", "velocities", True),)

    def __init__(self, ratio, warmup_steps=0, momentum=0.0):
        super().__init__()
        if not 0.0 <= float(momentum) < 1.0:
            raise ValueError(f"topk momentum must be in [0, 1), got {momentum}")
        self.momentum = float(momentum)
        self.velocities = {}
        ratio = float(ratio)
        if not 0.0 < ratio < 1.0:
            raise ValueError(f"topk ratio must be in (0, 1), got {ratio}")
        if int(warmup_steps) < 0:
            raise ValueError(f"topk warmup_steps must be >= 0, got {warmup_steps}")
        self.ratio, self.warmup_steps = ratio, int(warmup_steps)

    def ratio_at(self, step):
        if step >= self.warmup_steps:
            return self.ratio
        return self.ratio ** ((step + 1) / (self.warmup_steps + 1))

    def keeps_error(self, shape, size):
        return self.k_of(int(np.prod(shape)), size) is not None

    def k_of(self, numel, size, step=None):
        """Pairs a tensor of ``numel`` elements sends at ``step`` (default: after the warm-up,
        where the fewest are sent); None where it goes uncompressed."""
        ratio = self.ratio if step is None else self.ratio_at(step)
        k = max(1, int(np.ceil(ratio * numel)))
        return k if k * size < numel else None

    def expected_bytes_sent(self, shapes, itemsize, size):
        """After the warm-up."""
        ks = [(int(np.prod(s)), self.k_of(int(np.prod(s)), size)) for s in shapes]
        dense = sum(n for n, k in ks if k is None)
        pairs = sum(k for _, k in ks if k is not None)
        return ring_allreduce_bytes(dense, itemsize, size) + (size - 1) * pairs * 8

    def _reduce(self, grads, names, op, prescale, postscale):
        size = self.set_size()
        sparse = [(g, n, self.k_of(g.size, size, self.step)) for g, n in zip(grads, names)]
        dense = [(g, n) for g, n, k in sparse if k is None]
        sparse = [(g, n, k) for g, n, k in sparse if k is not None]
        handles = []
        if dense:
            for g, n in dense:
                if self.momentum:
                    g[...] = self._velocity(g, n)
            handles = _ops.grouped_allreduce_async([g for g, _ in dense], None,
                                                   [f"topk.dense.{n}" for _, n in dense],
                                                   op, prescale, postscale, **self._set_kw())
        total = sum(k for _, _, k in sparse)
        if total:
            # One row per pair: [index, float32 bits of the value], so a single all-gather
            # carries every tensor's pairs; every rank knows each tensor's k.
            pairs = np.empty((total, 2), dtype=np.int32)
            at = 0
            for g, n, k in sparse:
                u = self._velocity(g, n) if self.momentum else g
                m = self._with_error(u, n).reshape(-1)
                idx = np.argpartition(np.abs(m), m.size - k)[m.size - k:].astype(np.int32)
                vals = m[idx].astype(np.float32)
                pairs[at:at + k, 0] = idx
                pairs[at:at + k, 1] = vals.view(np.int32)
                m[idx] -= vals.astype(m.dtype)      # what was sent leaves the error
                self.errors[n] = m.reshape(g.shape)
                if self.momentum:
                    u.reshape(-1)[idx] = 0          # momentum factor masking
                at += k
            gathered = _ops.wait(_ops.allgather_async(pairs, "topk.pairs", **self._set_kw())).output
            scale = prescale * postscale / (size if op == Average else 1)
            at = 0
            for g, n, k in sparse:
                flat = g.reshape(-1)
                flat[...] = 0
                for r in range(size):        # same order on every rank: identical sums
                    rows = gathered[r * total + at:r * total + at + k]
                    np.add.at(flat, rows[:, 0], rows[:, 1].view(np.float32).astype(g.dtype))
                flat *= scale
                at += k
        _ops.wait_all(handles)

    def _velocity(self, g, name):
        """This rank's momentum of ``name`` after this step's gradient (kept)."""
        u = self.velocities.get(name)
        u = g.copy() if u is None or u.shape != g.shape else self.momentum * u + g
        self.velocities[name] = u
        return u
