"""hvdlite.keras_archive: the optimizer class a saved .keras file was compiled with, read
from its zip without Keras."""

import json
import zipfile

from hvdlite.keras_archive import compiled_optimizer_class_name


def archive(path, config):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("config.json", json.dumps(config))
    return str(path)


def test_the_compiled_optimizer_is_named(tmp_path):
    path = archive(tmp_path / "m.keras", {"class_name": "Sequential", "compile_config": {
        "optimizer": {"class_name": "SGD", "config": {"learning_rate": 0.1}}}})
    assert compiled_optimizer_class_name(path) == "SGD"


def test_unknown_without_an_optimizer_or_an_archive(tmp_path):
    assert compiled_optimizer_class_name(archive(tmp_path / "a.keras", {})) is None
    assert compiled_optimizer_class_name(archive(tmp_path / "b.keras", {
        "compile_config": {"optimizer": "sgd"}})) is None      # a string: no class here
    assert compiled_optimizer_class_name(archive(tmp_path / "c.keras", {
        "compile_config": None})) is None
    (tmp_path / "weights.h5").write_bytes(b"not a zip")
    assert compiled_optimizer_class_name(str(tmp_path / "weights.h5")) is None
    assert compiled_optimizer_class_name(str(tmp_path / "missing.keras")) is None
    with zipfile.ZipFile(tmp_path / "d.keras", "w") as z:
        z.writestr("model.weights.h5", b"")
    assert compiled_optimizer_class_name(str(tmp_path / "d.keras")) is None
