#!/usr/bin/env bash
# Checks to run where a device machine is lent (16 cores; facts and traps:
# /work/shared/design/gpu-machine.md). One function per section; `scripts/device_check.sh`
# runs every section, `scripts/device_check.sh NAME...` the named ones. Each section assumes
# hvdlite is built and installed into $PYTHON (default python3) with MPI beside it.
set -u
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
run_ranks() {  # run_ranks NP SECONDS ARGS...: a launch at NP ranks with a hard timeout
  local np=$1 secs=$2
  shift 2
  timeout --kill-after=10 "$secs" "$PYTHON" -m hvdlite.runner \
    -np "$np" "$PYTHON" "$@"
}

# ---- issue 19 (helper nrank): shared-memory all-reduce for N ranks on one host ----
# The figures issue 19 asks for, at 8 and 16 ranks (timed only on a 16-core host; the
# 2-core development machine cannot): hvdlite against MPI per size, and the torch MLP step
# at 8 ranks against its no-communication step. About 2-3 minutes in all.
shm_nranks() {
  local np
  for np in 8 16; do
    echo "== shm_nranks: allreduce_bench at $np ranks"
    run_ranks "$np" 240 examples/allreduce_bench.py --sizes 4K 256K 4M 64M --target-time 0.2 --rounds 2
  done
  echo "== shm_nranks: torch_bench --models mlp at 8 ranks"
  OMP_NUM_THREADS=1 run_ranks 8 240 examples/torch_bench.py --models mlp
}
# ---- end of issue 19's section ----

sections=("$@")
[ ${#sections[@]} -eq 0 ] && sections=(shm_nranks)
for s in "${sections[@]}"; do "$s"; done
