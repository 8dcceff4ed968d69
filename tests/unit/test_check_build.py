"""hvdlite.runner.check_build: what it reports about the frameworks, without MPI."""
from hvdlite.runner import check_build


def test_a_folder_named_like_a_framework_is_not_the_framework(tmp_path, monkeypatch):
    # tests/tensorflow on PYTHONPATH is found as a namespace package called "tensorflow"
    # (the GPU machine's device check has tests/ on its path, and no TensorFlow).
    (tmp_path / "hvdlite_fake_framework").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert check_build._framework_version("hvdlite_fake_framework", ["hvdlite-fake-framework"]) is None


def test_an_installed_module_without_distribution_reports_version_unknown(tmp_path, monkeypatch):
    (tmp_path / "hvdlite_fake_framework2.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert check_build._framework_version("hvdlite_fake_framework2", ["no-such-dist"]) == "version unknown"


def test_a_missing_module_is_not_reported():
    assert check_build._framework_version("hvdlite_no_such_module", ["x"]) is None


def test_tf_op_library_reported_when_built_and_when_not(tmp_path, monkeypatch):
    from hvdlite.convert import tf_op_library
    built = tmp_path / tf_op_library.LIBRARY
    built.write_text("")
    monkeypatch.setattr(tf_op_library, "library_paths", lambda: [str(tmp_path / "x.so"), str(built)])
    assert check_build._tf_op_library() == f"graph-mode error op: {built}"
    monkeypatch.setattr(tf_op_library, "library_paths", lambda: [str(tmp_path / "x.so")])
    assert "not built" in check_build._tf_op_library()


def _cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return None


def test_the_core_uses_the_cpu_instructions_this_cpu_has():
    # The installed build (the wheel, in the README's set-up) must find AVX2, FMA and F16C
    # where /proc/cpuinfo lists them: the wheel's Zig runtime leaves __builtin_cpu_supports's
    # table empty, and Adasum then ran its portable kernels (Note [CPU features at run time]).
    import platform
    import pytest
    from hvdlite import _core
    flags = _cpu_flags()
    if flags is None or platform.machine() != "x86_64":
        pytest.skip("needs an x86-64 Linux CPU (/proc/cpuinfo)")
    info = dict(_core.build_info())
    assert info["adasum_avx2_fma"] == ({"avx2", "fma"} <= flags), info
    assert info["fp16_f16c"] == ({"avx", "f16c"} <= flags), info
    lines = check_build._cpu_kernels()
    assert lines[0].startswith("    [X]" if info["adasum_avx2_fma"] else "    [ ]"), lines
    assert lines[1].startswith("    [X]" if info["fp16_f16c"] else "    [ ]"), lines
