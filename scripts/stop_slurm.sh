#!/usr/bin/env bash
# Stops the Slurm that scripts/start_slurm.sh started (slurmd, slurmctld, munged), by the
# pid files in its directory ($HVDLITE_SLURM_DIR, default build/slurm in this checkout).
# Jobs still running on the node end with slurmd. Its state stays for a look at the logs;
# the next start wipes it.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${HVDLITE_SLURM_DIR:-$PWD/build/slurm}

stop() {   # name, pid file: SIGTERM, up to 10 s, then SIGKILL
  local name=$1 file=$2 pid
  [ -s "$file" ] || return 0
  pid=$(cat "$file")
  # Only a process of that name: a stale file's pid may belong to something else by now.
  if ! kill -0 "$pid" 2>/dev/null || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != "$name" ]; then
    rm -f "$file"; return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 100); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    echo "stop_slurm.sh: $name (pid $pid) ignored SIGTERM for 10 s; killing it" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$file"
  echo "stop_slurm.sh: stopped $name (pid $pid)"
}

# Jobs first: their slurmstepd processes would outlive slurmd.
if [ -s "$dir/run/slurmctld.pid" ] && kill -0 "$(cat "$dir/run/slurmctld.pid")" 2>/dev/null; then
  export SLURM_CONF=$dir/slurm.conf
  jobs=$(squeue -h -o %A 2>/dev/null || true)
  if [ -n "$jobs" ]; then
    scancel $jobs 2>/dev/null || true
    for _ in $(seq 100); do
      [ -z "$(squeue -h -o %A 2>/dev/null)" ] && break
      sleep 0.1
    done
  fi
fi
stop slurmd "$dir/run/slurmd.pid"
stop slurmctld "$dir/run/slurmctld.pid"
stop munged "$dir/run/munged.pid"
