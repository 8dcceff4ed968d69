"""In-process unit tests of the framework-free layer (hvdlite.policy, hvdlite.algorithms):
no mpirun, no framework; ranks, where a test needs several, are threads over a fake
collective layer (fake_collectives.py)."""

import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]   # fake_collectives, and tests/mpi_launch

from fake_collectives import FakeCollectives  # noqa: E402


@pytest.fixture
def ranks(monkeypatch):
    """``ranks(n)``: a FakeCollectives of n thread-ranks patched in for hvdlite.ops (and the
    core's size, and broadcast_object) in the algorithms that communicate."""
    from hvdlite.algorithms import (clipping, error_feedback, local_sgd, metric_average,
                                    powersgd, shard_exchange, sharded_state)

    def make(n):
        fake = FakeCollectives(n)
        for module in (clipping, error_feedback, local_sgd, metric_average, powersgd,
                       shard_exchange, sharded_state):
            monkeypatch.setattr(module, "_ops", fake)
        monkeypatch.setattr(error_feedback, "_core", _FakeCore(fake))
        monkeypatch.setattr(sharded_state, "broadcast_object", fake.broadcast_object)
        return fake
    return make


class _FakeCore:
    def __init__(self, fake):
        self._fake = fake

    def size(self):
        return self._fake.size()

    @staticmethod
    def round_through_wire(values, out, wire):
        assert wire == "fp16", "the fake core rounds to fp16 only"
        out[...] = values.astype(np.float16).astype(values.dtype)

