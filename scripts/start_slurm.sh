#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for tests/test_slurm.py and for trying the
# Slurm recipes of docs/slurm.md by hand:
#   bash scripts/start_slurm.sh          # prints the SLURM_CONF to export, and how to stop
#   bash scripts/stop_slurm.sh
# Installs Debian's slurmctld, slurmd and munge (Slurm 22.05 on Debian 12) when they are
# missing, writes a configuration with 4 slots on this host whatever its core count (ranks
# share cores: hvdlite's tests run 4 ranks on 2 cores), and starts munged, slurmctld and
# slurmd as root. Everything they keep (configuration, key, spool, state, logs, pid files)
# is under one directory, $HVDLITE_SLURM_DIR (default: build/slurm in this checkout),
# wiped at every start, so a second start is as clean as the first; Debian's own /etc/slurm
# and /etc/munge are not used. Clients find this cluster through SLURM_CONF.
# Settings: HVDLITE_SLURM_DIR, HVDLITE_SLURM_SLOTS (4), HVDLITE_SLURMCTLD_PORT (6817),
# HVDLITE_SLURMD_PORT (6818; tests/test_slurm.py picks free ones), HVDLITE_SLURM_WAIT_SECONDS
# (60: how long the node may take to become idle).
# Exit status: 0 with the node idle; 77 where the daemons cannot run here (not root, no
# Slurm and no way to install it); 1 when they were started and did not come up.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${HVDLITE_SLURM_DIR:-$PWD/build/slurm}
slots=${HVDLITE_SLURM_SLOTS:-4}
ctld_port=${HVDLITE_SLURMCTLD_PORT:-6817}
slurmd_port=${HVDLITE_SLURMD_PORT:-6818}
wait_seconds=${HVDLITE_SLURM_WAIT_SECONDS:-60}

cannot_run() { echo "start_slurm.sh: cannot run Slurm here: $*" >&2; exit 77; }
fail() { echo "start_slurm.sh: error: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || cannot_run "slurmd and munged must run as root (this is uid $(id -u))"

need=()
for tool in slurmctld slurmd munged sinfo srun sbatch salloc; do
  command -v "$tool" >/dev/null || need+=("$tool")
done
# srun --mpi=pmix: Debian's PMIx plugin loads libpmix.so (libpmix-dev) at slurmd's start,
# and fails the launch when it could not.
packages="slurmctld slurmd munge slurm-client libpmix2 libpmix-dev"
if command -v dpkg-query >/dev/null; then
  for package in libpmix2 libpmix-dev; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || need+=("$package")
  done
fi
if [ ${#need[@]} -gt 0 ]; then
  command -v apt-get >/dev/null || cannot_run "${need[*]} missing and there is no apt-get to install them"
  echo "start_slurm.sh: installing $packages (missing: ${need[*]})"
  export DEBIAN_FRONTEND=noninteractive
  # Another apt-get (a second checkout's start) may hold the lock: wait for it.
  { apt-get -q -o DPkg::Lock::Timeout=300 update >/dev/null &&
    apt-get -q -y -o DPkg::Lock::Timeout=300 install $packages >/dev/null; } ||
    cannot_run "apt-get could not install $packages (no network or no package source?)"
fi

# Whatever an earlier start of this directory left running goes first.
bash scripts/stop_slurm.sh >/dev/null 2>&1 || true
rm -rf "$dir"
mkdir -p "$dir"/{munge,state,spool,log,run}
# munged refuses a key readable by others and a socket folder others cannot enter.
chmod 700 "$dir/state" "$dir/spool"
chmod 755 "$dir" "$dir/munge"
conf=$dir/slurm.conf
host=$(hostname -s)

mungekey --create --keyfile="$dir/munge/munge.key" >/dev/null
chmod 600 "$dir/munge/munge.key"
munge_socket=$dir/munge/munge.socket.2
munged --force --socket="$munge_socket" --key-file="$dir/munge/munge.key" \
  --log-file="$dir/log/munged.log" --pid-file="$dir/run/munged.pid" \
  --seed-file="$dir/munge/munged.seed" ||
  fail "munged did not start: $(tail -3 "$dir/log/munged.log" 2>/dev/null)"

: > "$dir/plugstack.conf"   # not Debian's /etc/slurm/plugstack.conf
cat > "$conf" <<CONF
# Written by scripts/start_slurm.sh: one node, $slots slots, everything under $dir.
ClusterName=hvdlite
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
PlugStackConfig=$dir/plugstack.conf
# No cgroups: this may be a container; processes are tracked by parentage.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SwitchType=switch/none
MailProg=/bin/true
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# srun picks no MPI plugin unless asked (--mpi=pmix): as on most clusters.
MpiDefault=none
ReturnToService=2
# The node has $slots CPUs whatever slurmd counts: without this, fewer real cores than
# configured would drain it.
SlurmdParameters=config_overrides
InactiveLimit=0
KillWait=5
MinJobAge=60
SlurmdTimeout=60
NodeName=$host NodeAddr=127.0.0.1 CPUs=$slots State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
export SLURM_CONF=$conf

slurmctld -f "$conf" || fail "slurmctld did not start: $(tail -5 "$dir/log/slurmctld.log" 2>/dev/null)"
slurmd -f "$conf" || fail "slurmd did not start: $(tail -5 "$dir/log/slurmd.log" 2>/dev/null)"

state=""
for _ in $(seq "$wait_seconds"); do
  state=$(sinfo -h -N -n "$host" -o %T 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 1
done
if [ "$state" != idle ]; then
  reason=$(sinfo -h -N -n "$host" -o %E 2>/dev/null || true)
  fail "node $host is '${state:-not known to slurmctld}'${reason:+ ($reason)} after ${wait_seconds} s;" \
       "last lines of $dir/log/slurmctld.log and slurmd.log:
$(tail -5 "$dir/log/slurmctld.log" 2>/dev/null)
$(tail -5 "$dir/log/slurmd.log" 2>/dev/null)"
fi

stop="bash $PWD/scripts/stop_slurm.sh"
[ -z "${HVDLITE_SLURM_DIR:-}" ] || stop="HVDLITE_SLURM_DIR=$dir $stop"
cat <<DONE
start_slurm.sh: Slurm is up: node $host idle with $slots slots (partition debug), state in $dir
  export SLURM_CONF=$conf     # for sinfo, srun, salloc, sbatch
  $stop     # stops munged, slurmctld and slurmd
DONE
