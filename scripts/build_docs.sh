#!/usr/bin/env bash
# Builds the docs site (docs/, mkdocs.yml) into build/site/, or into the folder given, with
# warnings as errors. The API pages are generated from the docstrings (mkdocstrings reads the
# source without importing it) and the settings table from hvdlite.config (docs/hooks/), so
# hvdlite must be built first (scripts/setup.sh). tests/test_docs.py runs this in the suite.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
exec "$PY" -m mkdocs build --strict --site-dir "${1:-build/site}"
