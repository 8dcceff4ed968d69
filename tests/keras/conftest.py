"""The Keras suite needs Keras 3 and the built hvdlite core; each backend's tests also
need that backend's framework (they are skipped where it is not installed)."""
import os
import sys

import pytest

pytest.importorskip("keras")
pytest.importorskip("sklearn")
pytest.importorskip("hvdlite._core", reason="hvdlite's C++ core is not built")

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if TESTS not in sys.path:
    sys.path.insert(0, TESTS)

BACKEND_MODULES = {"tensorflow": "tensorflow", "torch": "torch", "jax": "jax"}


@pytest.fixture(params=sorted(BACKEND_MODULES))
def keras_backend(request):
    """Each Keras backend whose framework is installed."""
    pytest.importorskip(BACKEND_MODULES[request.param])
    return request.param
