"""A float64 numpy reference of Adasum (Maleki et al., MLSys 2021), written as Horovod's own
test_adasum_*.py write it: pairs of ranks combine as

    a * (1 - a.b / (2 |a|^2)) + b * (1 - a.b / (2 |b|^2))

(a coefficient stays 1 for a vector whose squared norm is below sqrt(DBL_MIN)), ranks 0+1,
2+3, ... first, then pairs of pairs, up to one vector. Per tensor, never over a whole group.
"""
import math
import sys

import numpy as np

_TINY = math.sqrt(sys.float_info.min)


def adasum_pair(a, b):
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    dot, aa, bb = float(a @ b), float(a @ a), float(b @ b)
    ca = 1.0 - dot / aa * 0.5 if aa >= _TINY else 1.0
    cb = 1.0 - dot / bb * 0.5 if bb >= _TINY else 1.0
    return ca * a + cb * b


def adasum_tree(per_rank):
    """The Adasum of one tensor given every rank's value (a list, rank order)."""
    shape = np.shape(per_rank[0])
    v = [np.asarray(x, np.float64).ravel() for x in per_rank]
    step = 1
    while step < len(v):
        for i in range(0, len(v) - step, 2 * step):
            v[i] = adasum_pair(v[i], v[i + step])
        step *= 2
    return v[0].reshape(shape)


def relative_error(got, want):
    got = np.asarray(got, np.float64).ravel()
    want = np.asarray(want, np.float64).ravel()
    norm = np.linalg.norm(want)
    diff = np.linalg.norm(got - want)
    return diff / norm if norm else diff


# Per dtype: how far a result may be from the float64 reference (relative, in norm). Each
# level of the tree rounds to the dtype once; the dot products stay in float64.
def tolerance(eps, ranks):
    return 4.0 * eps * (max(1, ranks).bit_length())
