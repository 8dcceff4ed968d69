"""hvdlite.algorithms.clipping: the global norm of gradients sharded over ranks, and the
clip coefficient (torch.nn.utils.clip_grad_norm_'s rule)."""

import math

import numpy as np
import pytest

from hvdlite.algorithms.clipping import clip_coefficient, global_norm, local_part


@pytest.mark.parametrize("norm_type", [1.0, 2.0, 3.0, math.inf])
def test_norm_over_shards_is_the_norm_of_the_whole(ranks, norm_type):
    rng = np.random.default_rng(0)
    whole = rng.standard_normal(23)
    shards = np.array_split(whole, 3)
    fake = ranks(3)
    totals = fake.run_ranks(lambda r: global_norm([shards[r][:5], shards[r][5:]], norm_type,
                                                  "zero.clip"))
    expected = np.linalg.norm(whole, ord=norm_type)
    assert all(t == totals[0] for t in totals)
    assert totals[0] == pytest.approx(expected, rel=1e-12)
    suffix = "max" if norm_type == math.inf else "sum"
    assert {names[0] for _, _, names in fake.calls} == {f"zero.clip.{suffix}"}


def test_empty_shards_contribute_nothing():
    assert local_part([np.zeros(0)], math.inf) == 0.0
    assert local_part([], 2.0) == 0.0


def test_clip_coefficient():
    assert clip_coefficient(1.0, 0.5, 2.0) == 1.0
    assert clip_coefficient(1.0, 4.0, 2.0) == pytest.approx(1.0 / (4.0 + 1e-6))
    assert clip_coefficient(1.0, math.inf, 2.0) == 0.0
    with pytest.raises(RuntimeError, match="order 2.0 .* non-finite"):
        clip_coefficient(1.0, math.nan, 2, error_if_nonfinite=True)
