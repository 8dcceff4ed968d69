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
