"""The docs site builds with warnings as errors (scripts/build_docs.sh: mkdocs build --strict),
its settings page holds the code's table, and its API pages hold the public names generated
from the docstrings."""
import os
import subprocess
import sys

from hvdlite import config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_docs_build_strict(tmp_path):
    site = tmp_path / "site"
    env = dict(os.environ, PYTHON=sys.executable)
    build = subprocess.run(["bash", os.path.join(ROOT, "scripts", "build_docs.sh"), str(site)],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stdout}\n{build.stderr}"

    settings_page = (site / "settings" / "index.html").read_text()
    for s in config.settings():
        assert s.name in settings_page, f"docs/settings.md lacks {s.name}"
        assert not s.alias or s.alias in settings_page, f"docs/settings.md lacks {s.alias}"

    # One name per API page, each a different route: an __all__ list (torch), imports gathered
    # without __all__ (hvdlite, tensorflow, keras: docs/hooks/griffe_public_api.py), a submodule.
    expected = {
        "hvdlite": ["hvdlite.allreduce", "hvdlite.init", "hvdlite.ProcessSet", "hvdlite.Work"],
        "torch": ["hvdlite.torch.DistributedOptimizer", "hvdlite.torch.allreduce_async_",
                  "hvdlite.torch.elastic.TorchState"],
        "tensorflow": ["hvdlite.tensorflow.DistributedGradientTape",
                       "hvdlite.tensorflow.keras.DistributedOptimizer",
                       "hvdlite.tensorflow.keras.callbacks.BroadcastGlobalVariablesCallback"],
        "keras": ["hvdlite.keras.DistributedOptimizer", "hvdlite.keras.load_model",
                  "hvdlite.keras.callbacks.MetricAverageCallback"],
        "elastic": ["hvdlite.elastic.run.run", "hvdlite.elastic.State", "hvdlite.elastic.ObjectState"],
    }
    for page, names in expected.items():
        html = (site / "api" / page / "index.html").read_text()
        missing = [n for n in names if f'id="{n}"' not in html]
        assert not missing, f"docs/api/{page}.md renders without {missing}"
