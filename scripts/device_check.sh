#!/usr/bin/env bash
# The device check: everything about GPUs that CI (no GPU) cannot run, in one go, on a machine
# with the CUDA image (see docs/torch.md, "GPUs"). Under 8 minutes there:
#   bash scripts/download_device_wheels.sh     # here, first: the wheels that machine lacks
#   bash scripts/device_check.sh               # there
# Sections are functions; each prints its figures and the time it took. HVDLITE_DEVICE_CHECK
# picks sections (default: "gpu nranks"; nranks needs the build gpu_setup makes).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=${HVDLITE_DEVICE_WHEELS:-.device-wheels}
failed=0

say() { echo; echo "== $* [$(date -u +%T)]"; }
step() {  # step SECONDS DESCRIPTION COMMAND...: runs it with a hard timeout, records failure
  local limit=$1 what=$2; shift 2
  say "$what"
  local t0=$SECONDS
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  echo "-- $what: exit $rc in $((SECONDS - t0)) s"
  [ $rc -eq 0 ] || failed=1
  return $rc
}

# ---------------------------------------------------------------------------------------
# GPU section (issue 18): set-up from carried wheels, build, --check-build, CUDA tensors at
# 2 ranks on one GPU, the stand-in checks, the GPU benchmark table.
gpu_setup() {
  say "machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  echo "cores: $(getconf _NPROCESSORS_ONLN) (nproc may print OMP_NUM_THREADS); python: $(command -v "$PY")"
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())"
  if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
    step 120 "install carried wheels" "$PY" -m pip install --disable-pip-version-check -q \
      --no-index --no-deps "$WHEELS"/*.whl || return 1
  else
    echo "no wheels in $WHEELS: run scripts/download_device_wheels.sh where a registry is reachable"
  fi
  # The image's CXX links libstdc++ statically (issue 18): build with the system's compilers,
  # in a build folder of their own (CMake caches the compiler).
  local cc=${HVDLITE_DEVICE_CC:-/usr/bin/gcc} cxx=${HVDLITE_DEVICE_CXX:-/usr/bin/g++}
  [ -x "$cxx" ] || { cc=${CC:-gcc}; cxx=${CXX:-g++}; }
  PATH="$(dirname "$(command -v "$PY")"):$PATH" CC=$cc CXX=$cxx \
    step 300 "build hvdlite ($cxx)" "$PY" -m pip install --disable-pip-version-check -q \
      --no-index --no-deps --no-build-isolation --config-settings=build-dir=build/device-check -e . || return 1
  step 60 "check-build" "$PY" -m hvdlite --check-build
}

gpu_run() {  # gpu_run RANKS SECONDS SCRIPT ARGS...
  local np=$1 limit=$2; shift 2
  step "$limit" "$* at $np rank(s)" "$PY" -m hvdlite.runner -np "$np" "$PY" "$@"
}

gpu_checks() {
  export PYTHONPATH="$PWD/tests:$PWD${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1
  # NCCL at one rank (it refuses two ranks on one GPU); two ranks share the GPU staged.
  HVDLITE_GPU_OPERATIONS=nccl gpu_run 1 180 tests/workers/gpu_torch_cuda.py
  HVDLITE_GPU_OPERATIONS=mpi gpu_run 1 180 tests/workers/gpu_torch_cuda.py
  gpu_run 2 240 tests/workers/gpu_torch_cuda.py
  # The stand-in checks too: the same core logic against the fake runtime, for comparison.
  local standin
  standin=$("$PY" -c "import sys; sys.path.insert(0, 'tests/gpu'); from standins.build import cudart_standin; print(cudart_standin())") &&
    HVDLITE_CUDA_RUNTIME_LIBRARY=$standin CUDA_STANDIN_COPY_DELAY_US=2000 HVDLITE_DYNAMIC_PROCESS_SETS=1 \
      gpu_run 2 120 tests/workers/gpu_standin_core.py
}

gpu_bench() {
  gpu_run 2 300 examples/gpu_bench.py
}

gpu_section() {
  local t0=$SECONDS
  gpu_setup || { echo "GPU set-up failed; no checks run"; failed=1; return; }
  gpu_checks
  gpu_bench
  say "GPU section done in $((SECONDS - t0)) s"
}
# ---------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------
# N ranks on one host (issue 19): the figures the 2-core development machine cannot time,
# on the device's 16 cores, after gpu_setup built hvdlite: hvdlite against MPI per size at 8
# and 16 ranks, and the torch MLP step at 8 ranks against its no-communication step.
# About 2-3 minutes.
nranks_section() {
  local t0=$SECONDS np
  for np in 8 16; do
    gpu_run "$np" 240 examples/allreduce_bench.py --sizes 4K 256K 4M 64M --target-time 0.2 --rounds 2
  done
  OMP_NUM_THREADS=1 gpu_run 8 240 examples/torch_bench.py --models mlp
  say "N-rank section done in $((SECONDS - t0)) s"
}
# ---------------------------------------------------------------------------------------

for section in ${HVDLITE_DEVICE_CHECK:-gpu nranks}; do
  "${section}_section"
done
exit $failed
