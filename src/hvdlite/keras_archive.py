"""What hvdlite reads from a saved ``.keras`` file without loading it (so without Keras): the
file is a zip archive whose ``config.json`` holds the model's compile config."""

import json
import zipfile


def compiled_optimizer_class_name(filepath):
    """The class name of the optimizer a ``.keras`` file was compiled with; None when that is
    unknown (not a ``.keras`` archive, or compiled without an optimizer)."""
    try:
        with zipfile.ZipFile(filepath) as z:
            config = json.loads(z.read("config.json"))
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
    opt = ((config.get("compile_config") or {}).get("optimizer") or {})
    cls_name = opt.get("class_name") if isinstance(opt, dict) else None
    return cls_name or None
