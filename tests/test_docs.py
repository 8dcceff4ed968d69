"""The docs site builds with warnings as errors (scripts/build_docs.sh: mkdocs build --strict),
its settings page holds the code's table, its API pages hold the public names generated from
the docstrings, the files it cites exist, and the README stays short with working links."""
import glob
import os
import re
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

    # Names reached by different routes: an __all__ list (torch), imports gathered without
    # __all__ (hvdlite, tensorflow, keras: docs/hooks/griffe_public_api.py), submodules.
    expected = {
        "hvdlite": ["hvdlite.allreduce", "hvdlite.init", "hvdlite.ProcessSet", "hvdlite.Work"],
        "torch": ["hvdlite.torch.DistributedOptimizer", "hvdlite.torch.allreduce_async_",
                  "hvdlite.torch.elastic.TorchState"],
        "tensorflow": ["hvdlite.tensorflow.DistributedGradientTape",
                       "hvdlite.tensorflow.keras.DistributedOptimizer",
                       "hvdlite.tensorflow.keras.callbacks.BroadcastGlobalVariablesCallback"],
        "keras": ["hvdlite.keras.DistributedOptimizer", "hvdlite.keras.load_model",
                  "hvdlite.keras.callbacks.MetricAverageCallback"],
        "elastic": ["hvdlite.elastic.run.run", "hvdlite.elastic.State",
                    "hvdlite.elastic.ObjectState"],
    }
    for page, names in expected.items():
        html = (site / "api" / page / "index.html").read_text()
        missing = [n for n in names if f'id="{n}"' not in html]
        assert not missing, f"docs/api/{page}.md renders without {missing}"


def test_readme_fits_two_screens_and_its_links_resolve():
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert len(readme.splitlines()) <= 150, "README.md grew past 150 lines; move detail to docs/"
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    assert links, "README.md links to no docs page"
    broken = [link for link in links
              if not link.startswith("http") and not os.path.exists(os.path.join(ROOT, link))]
    assert not broken, f"README.md links to missing files {broken}"


def test_files_the_docs_cite_exist():
    # `csrc/...`, `hvdlite/...`, `tests/...`, `examples/...`, `scripts/...` in the pages' text:
    # a moved or renamed file must take its documentation along.
    cited = set()
    for page in glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True):
        text = open(page).read()
        cited |= {(os.path.relpath(page, ROOT), p) for p in
                  re.findall(r"`((?:csrc|hvdlite|tests|examples|scripts)/[A-Za-z0-9_/.*]+)", text)}
    missing = sorted((page, p) for page, p in cited
                     if not glob.glob(os.path.join(ROOT, p.rstrip("*").rstrip(".") + "*")))
    assert not missing, f"the docs cite files that do not exist: {missing}"
