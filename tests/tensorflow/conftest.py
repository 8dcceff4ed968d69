"""The TensorFlow suite needs TensorFlow (and Keras 3) and the built hvdlite core."""
import os
import sys

import pytest

pytest.importorskip("tensorflow")
pytest.importorskip("keras")
pytest.importorskip("hvdlite._core", reason="hvdlite's C++ core is not built")

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)
