"""hvdlite.convert.host_call: what every Keras bridge's host_call runs on the host."""

import numpy as np

from hvdlite.convert.host_call import on_host


def test_the_function_gets_writable_copies_and_a_bool():
    given = np.arange(3.0)
    given.flags.writeable = False
    seen = []

    def fn(run, a):
        seen.append(run)
        a += 1                      # a copy: writable, and the caller's array is kept
        return [a]
    out = on_host(fn, [((3,), "float64")])(np.bool_(False), given)
    assert seen == [False] and type(seen[0]) is bool
    np.testing.assert_array_equal(out[0], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(given, [0.0, 1.0, 2.0])


def test_results_take_the_promised_shapes_and_dtypes():
    host = on_host(lambda run, x: [x.sum(), [1, 2, 3, 4]], [((), "float32"), ((2, 2), "int32")])
    total, grid = host(True, np.ones((2, 3)))
    assert total.shape == () and total.dtype == np.float32 and total == 6
    assert grid.shape == (2, 2) and grid.dtype == np.int32
