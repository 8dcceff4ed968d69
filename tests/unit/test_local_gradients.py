"""hvdlite.policy.local_gradients: gradients kept local are not reduced, and are divided by
the number of ranks with scale_local_gradients (Horovod's rule)."""

import operator

from hvdlite.policy.local_gradients import reduce_except_local


def test_shared_reduced_local_scaled():
    asked = []

    def reduce(grads, variables):
        asked.append((grads, variables))
        return [10.0 * g for g in grads]
    out = reduce_except_local(reduce, (4.0, 6.0, None, 8.0), "abcd", [True, False, True, False],
                              True, 2, operator.truediv)
    assert out == [2.0, 60.0, None, 80.0] and asked == [([6.0, 8.0], ["b", "d"])]


def test_local_left_as_is_without_scaling():
    out = reduce_except_local(lambda grads, variables: [0.0] * len(grads), [4.0, 6.0], "ab",
                              [True, False], False, 2, operator.truediv)
    assert out == [4.0, 0.0]
