#!/usr/bin/env bash
# The source distribution still builds, with the system's compiler, against the MPI whose
# mpicxx it finds (HVDLITE_MPICXX, PATH, or beside the interpreter): built into a fresh venv
# that sees this environment's packages, then checked with a 2-rank job.
#   bash scripts/check_sdist_build.sh          # both
#   bash scripts/check_sdist_build.sh build    # only the build (CI overlaps it with the suite)
#   bash scripts/check_sdist_build.sh check    # only the check of the last build
set -euo pipefail
phase=${1:-all}
cd "$(dirname "$0")/.."
checkout=$PWD
PY=${PYTHON:-python3}
root=$PWD/build/sdist-check
if [ "$phase" != check ]; then
  rm -rf "$root" && mkdir -p "$root"
  tools=$PWD/build/wheel-tools
  [ -x "$tools/bin/python" ] || bash scripts/build_wheel.sh >/dev/null   # installs the tools
  "$tools/bin/pip" install --disable-pip-version-check -q build
  "$tools/bin/python" -m build --sdist -o "$root" . >/dev/null
  sdist=$(ls "$root"/hvdlite-*.tar.gz)
  "$PY" -m venv --system-site-packages "$root/venv"
  mpicxx=${HVDLITE_MPICXX:-$("$PY" -c "import os, sys; print(os.path.join(sys.prefix, 'bin', 'mpicxx'))")}
  start=$(date +%s)
  HVDLITE_MPICXX=$mpicxx "$root/venv/bin/pip" install --disable-pip-version-check -q --no-deps \
    --no-binary hvdlite "$sdist"
  echo "check_sdist_build: $(basename "$sdist") built and installed in $(( $(date +%s) - start )) s"
fi
[ "$phase" != build ] || exit 0
[ -x "$root/venv/bin/hvdlite-run" ] || { echo "check_sdist_build: no build in $root to check" >&2; exit 1; }
cd "$root"
"$root/venv/bin/python" -m hvdlite --check-build | sed -n '/controllers/,/ULFM/p'
PATH="$root/venv/bin:$PATH" OMP_NUM_THREADS=1 timeout 120 hvdlite-run -np 2 python "$checkout/tests/workers/install_smoke.py" "source build"
