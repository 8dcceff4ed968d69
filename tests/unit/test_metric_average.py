"""hvdlite.algorithms.metric_average: MetricAverageCallback's averaging of logged metrics."""

import numpy as np

from hvdlite.algorithms.metric_average import average_in_place, is_number


def test_numbers_are_averaged_and_the_rest_left(ranks):
    fake = ranks(3)

    def play(rank):
        logs = {"loss": float(rank), "acc": np.float32(2 * rank), "n": np.array([rank]),
                "note": "text", "vec": np.arange(2)}
        average_in_place(logs)
        return logs
    for logs in fake.run_ranks(play):
        assert logs["loss"] == 1.0 and logs["acc"] == 2.0 and logs["n"] == 1.0
        assert logs["note"] == "text" and list(logs["vec"]) == [0, 1]
    assert {tuple(names) for _, _, names in fake.calls} == {("MetricAverageCallback",)}


def test_empty_logs_send_nothing(ranks):
    fake = ranks(1)
    fake.run_ranks(lambda r: average_in_place({}))
    assert fake.calls == []


def test_what_counts_as_a_number():
    assert is_number(3) and is_number(np.float64(1.5)) and is_number(np.array([[2]]))
    assert not is_number("3") and not is_number([1, 2]) and not is_number(None)
    assert not is_number(object())
