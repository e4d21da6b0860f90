#!/usr/bin/env bash
# A real single-node Slurm on this machine, for the tests that run nexrl under
# Slurm (tests/integration/slurm, tests/e2e/test_slurm_run.py).
#
#   build-support/slurm.sh start    install (Debian packages, once), configure, start
#   build-support/slurm.sh stop     cancel every job, stop the daemons
#   build-support/slurm.sh status   one line: up/down and the node state
#
# Needs root (it writes /etc/slurm and starts munged/slurmctld/slurmd). The node
# offers this machine's cores, ~80% of its memory and 2 fake GPUs (gres on
# /dev/tty0-1), so `--gres=gpu:N` jobs are accepted on a CPU-only machine.
# Facts behind the settings: ../shared/notes/build-facts.md ("A real single-node Slurm").
set -euo pipefail

conf_dir=/etc/slurm
host=$(hostname -s)

die() { echo "slurm.sh: $*" >&2; exit 1; }

install_packages() {
  command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v sbatch >/dev/null \
    && command -v munged >/dev/null && return 0
  [ "$(id -u)" = 0 ] || die "Slurm is not installed and installing needs root: run '$0 start' as root (e.g. 'sudo $0 start')"
  command -v apt-get >/dev/null || die "no apt-get: install slurmctld, slurmd, slurm-client and munge with your package manager"
  echo "slurm.sh: installing slurmctld slurmd slurm-client munge (apt-get)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge >/dev/null
}

write_config() {
  local cpus mem_mb
  cpus=$(( $(nproc) * 8 > 16 ? $(nproc) * 8 : 16 ))  # oversubscribed: a run's ~6 jobs fit on 2 cores
  mem_mb=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.8}' /proc/meminfo)
  mkdir -p "$conf_dir" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
  cat > "$conf_dir/slurm.conf" <<CONF
# Written by nexrl build-support/slurm.sh: a single-node test cluster.
ClusterName=nexrl-test
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
MailProg=/bin/true
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
MinJobAge=300
KillWait=5
GresTypes=gpu
NodeName=${host} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${mem_mb} Gres=gpu:2 State=UNKNOWN
PartitionName=debug Nodes=${host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  echo "Name=gpu File=/dev/tty[0-1]" > "$conf_dir/gres.conf"
}

start_munge() {
  pgrep -x munged >/dev/null && return 0
  [ -s /etc/munge/munge.key ] || { mungekey --create >/dev/null 2>&1 || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
  chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
  mkdir -p /run/munge /var/log/munge /var/lib/munge; chown munge:munge /run/munge /var/log/munge /var/lib/munge
  su -s /bin/sh munge -c /usr/sbin/munged
}

node_state() { sinfo -h -N -o '%T' 2>/dev/null | head -1; }

start() {
  install_packages
  [ "$(id -u)" = 0 ] || die "starting the test Slurm needs root (it writes $conf_dir)"
  write_config
  start_munge
  pgrep -x slurmctld >/dev/null || slurmctld -c -i
  pgrep -x slurmd >/dev/null || slurmd
  for _ in $(seq 1 60); do
    state=$(node_state)
    case "$state" in
      idle*|mix*|alloc*) echo "slurm.sh: up: node ${host} ${state}, partition debug"; return 0 ;;
      drain*|down*) scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true ;;
    esac
    sleep 0.5
  done
  die "the node did not become idle (state '${state:-none}'); see /var/log/slurm/slurmctld.log and slurmd.log"
}

stop() {
  if command -v scancel >/dev/null && pgrep -x slurmctld >/dev/null; then
    scancel --full --signal=KILL --user="$(id -un)" >/dev/null 2>&1 || true
    scancel --user="$(id -un)" >/dev/null 2>&1 || true
  fi
  pkill -x slurmd 2>/dev/null || true
  pkill -x slurmctld 2>/dev/null || true
  for _ in $(seq 1 40); do
    pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || { echo "slurm.sh: stopped"; return 0; }
    sleep 0.25
  done
  pkill -9 -x slurmd 2>/dev/null || true
  pkill -9 -x slurmctld 2>/dev/null || true
  echo "slurm.sh: stopped (killed)"
}

status() {
  if pgrep -x slurmctld >/dev/null && pgrep -x slurmd >/dev/null; then
    echo "up: node $(node_state)"
  else
    echo "down"; return 1
  fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) die "usage: $0 start|stop|status" ;;
esac
