"""The core's in-process unit tests (csrc/tests): ranks are threads over a loopback transport.

They cover the coordinator's decision function, response-cache agreement, the message codec,
half-precision conversion, span fusion, the ring at 1 to 7 ranks, and the engine with process
sets. Built with CMake into build/core-unit-tests (kept between runs, so only changed sources
recompile) and run here, so CI runs them with the rest.
"""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, "build", "core-unit-tests")


def find_cmake():
    """cmake from PATH, else the PyPI package scikit-build-core uses; None if neither."""
    found = shutil.which("cmake")
    if found:
        return found
    try:
        import cmake  # the PyPI package scikit-build-core uses
        return os.path.join(cmake.CMAKE_BIN_DIR, "cmake")
    except ImportError:
        return None


@pytest.fixture(scope="module")
def unit_tests():
    cmake = find_cmake()
    if cmake is None or shutil.which(os.environ.get("CXX", "c++")) is None:
        pytest.skip("needs cmake and a C++ compiler (the same the extension build uses)")
    configure = [cmake, "-S", os.path.join(ROOT, "csrc", "tests"), "-B", BUILD]
    if shutil.which("ninja") and not os.path.exists(os.path.join(BUILD, "CMakeCache.txt")):
        configure += ["-G", "Ninja"]
    for cmd in (configure, [cmake, "--build", BUILD, "--parallel", "2"]):
        proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=900)
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-10000:]}"
    return os.path.join(BUILD, "core_unit_tests")


def test_core_unit_tests(unit_tests):
    proc = subprocess.run([unit_tests], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout
    assert ", 0 failed" in proc.stdout and "FAIL" not in proc.stdout, proc.stdout
    passed = int(proc.stdout.strip().splitlines()[-1].split()[0])
    assert passed >= 20, proc.stdout
