"""PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019) on numpy arrays, framework-free.

Each matrix-shaped gradient (n x m after folding every dimension past the first) is sent as
two thin matrices of rank r: per step, with M = gradient + error,

    P = M Q            all-reduced (summed: orthonormalising removes its scale)
    Q = M^T P          all-reduced (mean)
    result = P Q^T     the same on every rank
    error  = M - P (M^T P)^T      what this rank's rank-r view of M left out

Q carries over to the next step (one power iteration per step, warm-started). Q starts from
the same seeded random matrix on every rank. Tensors with fewer than 2 dimensions, and
matrices where r (n + m) >= n m, go uncompressed; so do all tensors for the first
``start_step`` steps (uncompressed all-reduce warms the model up; no error is kept then).
Bytes sent per compressed matrix: r (n + m) elements instead of n m.
"""

import zlib

import numpy as np

from hvdlite import ops as _ops
from hvdlite.policy import Average, Sum

from .error_feedback import GradientReducer, ring_allreduce_bytes


class PowerSGDReducer(GradientReducer):
    # Q is the same on every rank (it comes out of an all-reduce): restored on any of them.
    STATE = GradientReducer.STATE + (("q", "qs", False),)

    def __init__(self, rank=1, start_step=0, seed=0):
        super().__init__()
        if int(rank) < 1:
            raise ValueError(f"powersgd rank must be >= 1, got {rank}")
        if int(start_step) < 0:
            raise ValueError(f"powersgd start_step must be >= 0, got {start_step}")
        self.rank, self.start_step, self.seed = int(rank), int(start_step), int(seed)
        self.qs = {}

    def matrix_shape(self, shape):
        """(n, m) when a gradient of ``shape`` is compressed, else None."""
        if len(shape) < 2:
            return None
        n, m = int(shape[0]), int(np.prod(shape[1:]))
        return (n, m) if self.rank * (n + m) < n * m else None

    def expected_bytes_sent(self, shapes, itemsize, size):
        """Per step once compressing: dense tensors, then all P's, then all Q's."""
        dense = p = q = 0
        for s in shapes:
            nm = self.matrix_shape(s)
            if nm is None:
                dense += int(np.prod(s))
            else:
                p += nm[0] * self.rank
                q += nm[1] * self.rank
        return sum(ring_allreduce_bytes(e, itemsize, size) for e in (dense, p, q))

    def keeps_error(self, shape, size):
        return self.matrix_shape(shape) is not None

    def initial_q(self, name, shape, dtype):
        """The starting Q of tensor ``name`` of ``shape`` (None where it is not compressed):
        seeded by the name, so the same on every rank."""
        nm = self.matrix_shape(shape)
        return None if nm is None else self._initial_q(name, nm[1], dtype)

    def _initial_q(self, name, m, dtype):
        rng = np.random.default_rng([self.seed, zlib.crc32(name.encode())])
        return rng.standard_normal((m, self.rank)).astype(dtype)

    def _reduce(self, grads, names, op, prescale, postscale):
        compress = self.step >= self.start_step
        low = [(g, n, self.matrix_shape(g.shape)) for g, n in zip(grads, names)]
        dense = [(g, n) for g, n, s in low if s is None or not compress]
        low = [(g, n, s) for g, n, s in low if s is not None and compress]
        handles = []
        if dense:
            handles = _ops.grouped_allreduce_async([g for g, _ in dense], None,
                                                   [f"powersgd.dense.{n}" for _, n in dense],
                                                   op, prescale, postscale, **self._set_kw())
        if low:
            ms, ps = [], []
            for g, n, (rows, cols) in low:
                m = self._with_error(g, n).reshape(rows, cols)
                q = self.qs.get(n)
                if q is None or q.shape != (cols, self.rank):
                    q = self._initial_q(n, cols, m.dtype)
                ms.append(m)
                ps.append(np.ascontiguousarray(m @ q))
            # The scale of P does not matter (it is orthonormalised): sum it.
            _ops.wait_all(_ops.grouped_allreduce_async(
                ps, None, [f"powersgd.P.{n}" for _, n, _ in low], Sum,
                **self._set_kw()))
            qs = []
            for m, p in zip(ms, ps):
                p[...] = _orthonormalise(p)
                qs.append(np.ascontiguousarray(m.T @ p))
            local_qs = [q.copy() for q in qs]
            _ops.wait_all(_ops.grouped_allreduce_async(
                qs, None, [f"powersgd.Q.{n}" for _, n, _ in low], op, prescale, postscale,
                **self._set_kw()))
            for (g, n, _), m, p, q, q_local in zip(low, ms, ps, qs, local_qs):
                self.errors[n] = (m - p @ q_local.T).reshape(g.shape)
                self.qs[n] = q
                g[...] = (p @ q.T).reshape(g.shape)
        _ops.wait_all(handles)


def _orthonormalise(p):
    """Orthonormal columns spanning ``p``'s (QR; deterministic, so equal inputs on every
    rank give equal outputs). Columns that are zero stay zero instead of becoming NaN."""
    q, r = np.linalg.qr(p)
    zero = np.abs(np.diag(r)) < np.finfo(p.dtype).tiny
    if zero.any():
        q[:, zero] = 0
    return q.astype(p.dtype, copy=False)


__all__ = ["PowerSGDReducer", "Average"]
