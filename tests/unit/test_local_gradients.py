"""hvdlite.policy.local_gradients: gradients kept local are not reduced, and are divided by
the number of ranks with scale_local_gradients (Horovod's rule)."""

import operator

from hvdlite.policy.local_gradients import reduce_except_local


def test_shared_reduced_local_scaled():
    asked = []

    def reduce(shared):
        asked.append(shared)
        return [10.0 * i for i in shared]
    out = reduce_except_local(reduce, [4.0, 6.0, None, 8.0], [True, False, True, False], True, 2,
                              operator.truediv)
    assert out == [2.0, 10.0, None, 30.0] and asked == [[1, 3]]


def test_local_left_as_is_without_scaling():
    out = reduce_except_local(lambda shared: [0.0] * len(shared), [4.0, 6.0], [True, False],
                              False, 2, operator.truediv)
    assert out == [4.0, 0.0]
