"""A compiler that links libstdc++ statically must not produce a module that crashes.

Some CUDA images wrap g++ so that it links libstdc++ statically; the module then exported
~260 libstdc++ symbols and every multi-rank job crashed once torch had loaded the shared
libstdc++ (CMakeLists.txt, Note [one exported symbol]). This builds the core once with such a
wrapper, checks that the module exports PyInit__core alone (and that the wrapper really linked
libstdc++ into it), and runs a 2-rank torch job on that build, torch imported first.
"""
import os
import shutil
import stat
import subprocess
import sys

import pytest

from mpi_launch import REPO, run_mpi
from test_core_unit import find_cmake

pytest.importorskip("torch")


def _run(cmd, **kw):
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=900, **kw)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout[-10000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def static_build(tmp_path_factory):
    cmake, cxx = find_cmake(), shutil.which("g++")
    if cmake is None or cxx is None or shutil.which("nm") is None or shutil.which("readelf") is None:
        pytest.skip("needs cmake, g++, nm and readelf")
    tmp = tmp_path_factory.mktemp("static_libstdcxx")
    # HVDLITE_STATIC_CXX: a real compiler that links libstdc++ statically (the CUDA image's
    # /opt/gcc/bin/g++; scripts/device_check.sh), instead of the wrapper made here.
    wrapper = os.environ.get("HVDLITE_STATIC_CXX")
    if not wrapper:
        wrapper = tmp / "g++-static-libstdcxx"
        wrapper.write_text(f'#!/bin/sh\nexec {cxx} -static-libstdc++ -static-libgcc "$@"\n')
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    build = tmp / "build"
    _run([cmake, "-S", REPO, "-B", str(build), f"-DCMAKE_CXX_COMPILER={wrapper}",
          f"-DPython_EXECUTABLE={sys.executable}", "-DCMAKE_BUILD_TYPE=Release"])
    _run([cmake, "--build", str(build), "--parallel", "2"])   # runs the export check too
    module = next(build.glob("_core*.so"))
    package = tmp / "pkg" / "hvdlite"
    shutil.copytree(os.path.join(REPO, "src", "hvdlite"), package,
                    ignore=shutil.ignore_patterns("_core*.so", "__pycache__"))
    shutil.copy(module, package / module.name)
    (package / "mpi_plugins").mkdir()
    for plugin in build.glob("libhvdlite_mpi_*.so"):
        shutil.copy(plugin, package / "mpi_plugins" / plugin.name)
    return module, package.parent


def test_module_exports_only_its_init(static_build):
    module, _ = static_build
    needed = _run(["readelf", "-d", str(module)])
    assert "libstdc++.so" not in needed, "the wrapper did not link libstdc++ statically:\n" + needed
    symbols = _run(["nm", "-D", "--defined-only", str(module)]).split()
    exported = [s for s in symbols[2::3]]
    assert exported == ["PyInit__core"], exported[:20]


def test_two_rank_torch_job(static_build):
    _, package_dir = static_build
    proc = run_mpi(2, "workers/static_libstdcxx_torch.py", package_dir, timeout=240)
    assert proc.stdout.count("static libstdc++ job OK") == 2, proc.stdout[-5000:]


def test_check_build_reports_static(static_build):
    _, package_dir = static_build
    code = ("import sys; sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "
            "'ScikitBuildRedirectingFinder']; sys.path.insert(0, sys.argv[1]); "
            "from hvdlite.runner.check_build import check_build; print(check_build())")
    out = _run([sys.executable, "-c", code, str(package_dir)])
    assert "C++ runtime:   static" in out, out
