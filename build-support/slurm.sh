#!/usr/bin/env bash
# A real Slurm on this machine, for the tests that run nexrl under Slurm:
# one node (tests/integration/slurm, tests/e2e/test_slurm_run.py) or several
# (tests/e2e/test_slurm_multinode.py).
#
#   build-support/slurm.sh start              install (Debian packages, once), configure, start one node
#   build-support/slurm.sh start --nodes N    a second, separate Slurm of N nodes (below)
#   build-support/slurm.sh stop               stop everything: both Slurms, every job, the nodes' namespaces
#   build-support/slurm.sh stop --nodes       the N-node Slurm only (the one-node Slurm keeps running)
#   build-support/slurm.sh status [--nodes]   one line: up/down and the node states
#   build-support/slurm.sh env --nodes        'export SLURM_CONF=...': point sbatch/squeue/nexrl at the N nodes
#   build-support/slurm.sh node-down NAME     take node NAME down as a failing machine would go
#   build-support/slurm.sh partition NAME S   cut node NAME's link for S seconds, then put it back
#
# Needs root (it writes /etc/slurm and starts munged/slurmctld/slurmd). The node
# offers this machine's cores, ~80% of its memory and 2 fake GPUs (gres on
# /dev/tty0-1), so `--gres=gpu:N` jobs are accepted on a CPU-only machine.
# Facts behind the settings: ../shared/notes/build-facts.md ("A real single-node Slurm").
#
# Several nodes (--nodes N, 1-40): each node is a Linux network namespace
# nexrl-n<i> joined by a veth pair to a bridge on this machine (nexrl-br0,
# 10.77.0.1/24; node i at 10.77.0.<10+i>, its interface eth0, its own lo up, no
# default route: a node reaches the other nodes and this machine's bridge address,
# nothing else). Each runs its own `slurmd -N nexrl-n<i>` inside its namespace; one
# slurmctld on this machine (port 6827, config /etc/slurm-nodes/slurm.conf) and the
# one munged (its unix socket is shared: namespaces isolate only the network; so
# are the file system and /dev/shm). Each node offers 1 fake GPU (NEXRL_SLURM_NODE_GPUS=K: K),
# so one trainer rank or inference job per node; the partition spreads jobs over
# the least loaded nodes (LLN). A driver on this machine reaches the nodes on the
# bridge address: cluster.slurm.scheduler_host=10.77.0.1. Client commands need
# SLURM_CONF=/etc/slurm-nodes/slurm.conf (`eval "$(build-support/slurm.sh env --nodes)"`).
# It runs beside the one-node Slurm (its own port, state, pid and log files).
#
# `partition NAME S` is a network partition of one node: its bridge port (nexrl-v<i>,
# the switch's side of its cable) goes down for S seconds, then up again. The node's
# eth0 loses its carrier, every packet to or from it is dropped, and its processes
# (slurmd, jobs, workers, servers) keep running untold: no reset, no error, as when a
# switch or cable fails. The link comes back when S is up, on Ctrl-C, kill or a
# caller's timeout (a trap), and even after kill -9 (a detached watchdog); `stop
# --nodes` ends a partition under way. `node-down` is the other node fault: the node dies.
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

node_state() { SLURM_CONF="$conf_dir/slurm.conf" sinfo -h -N -o '%T' 2>/dev/null | head -1; }

# pid_alive FILE NAME: the process FILE names is running and is NAME
pid_alive() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ]
}

start() {
  install_packages
  [ "$(id -u)" = 0 ] || die "starting the test Slurm needs root (it writes $conf_dir)"
  write_config
  start_munge
  # by pid file: the N-node Slurm's daemons (same names) may be running beside it
  pid_alive /run/slurmctld.pid slurmctld || slurmctld -c -i
  pid_alive /run/slurmd.pid slurmd || slurmd
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
  stop_nodes
  if command -v scancel >/dev/null && pgrep -x slurmctld >/dev/null; then
    export SLURM_CONF="$conf_dir/slurm.conf"
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
  if pid_alive /run/slurmctld.pid slurmctld && pid_alive /run/slurmd.pid slurmd; then
    echo "up: node $(node_state)"
  else
    echo "down"; return 1
  fi
}

# --- several nodes, each a network namespace ---------------------------------
nodes_conf_dir=/etc/slurm-nodes
nodes_conf="$nodes_conf_dir/slurm.conf"
net=${NEXRL_SLURM_NET:-10.77.0}  # the nodes' /24
bridge=nexrl-br0
bridge_addr="$net.1"
ctld_port=6827
ctld_pid=/run/slurmctld-nodes.pid
nodes_log=/var/log/slurm/nodes

node_names() {  # the nodes that exist now (their namespaces)
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^nexrl-n[0-9]+$' | sort -V || true
}

write_nodes_config() {
  local n=$1 gpus=$2 cpus mem_mb names="" i
  cpus=$(( $(nproc) * 4 > 8 ? $(nproc) * 4 : 8 ))  # oversubscribed, as the one node is
  mem_mb=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.8}' /proc/meminfo)
  mkdir -p "$nodes_conf_dir" /var/spool/slurmctld-nodes "$nodes_log"
  for i in $(seq 1 "$n"); do mkdir -p "/var/spool/slurmd-nodes/nexrl-n$i"; done
  {
    cat <<CONF
# Written by nexrl build-support/slurm.sh start --nodes $n: $n nodes, each a network namespace.
ClusterName=nexrl-nodes
SlurmctldHost=$(hostname -s)(${bridge_addr})
SlurmctldPort=${ctld_port}
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=/var/spool/slurmctld-nodes
SlurmdSpoolDir=/var/spool/slurmd-nodes/%n
SlurmctldPidFile=${ctld_pid}
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=${nodes_log}/slurmctld.log
SlurmdLogFile=${nodes_log}/slurmd-%n.log
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
SlurmdTimeout=30
GresTypes=gpu
CONF
    for i in $(seq 1 "$n"); do
      echo "NodeName=nexrl-n$i NodeAddr=$net.$((10 + i)) CPUs=${cpus} RealMemory=${mem_mb} Gres=gpu:${gpus} State=UNKNOWN"
      names="${names:+$names,}nexrl-n$i"
    done
    echo "PartitionName=debug Nodes=${names} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES LLN=YES"
  } > "$nodes_conf"
  echo "Name=gpu File=/dev/tty[0-$((gpus - 1))]" > "$nodes_conf_dir/gres.conf"
}

make_node() {  # make_node I: namespace nexrl-nI, veth nexrl-vI <-> its eth0, address, lo up
  local i=$1 ns="nexrl-n$1" veth="nexrl-v$1"
  ip netns add "$ns"
  ip link add "$veth" type veth peer name eth0 netns "$ns"
  ip link set "$veth" master "$bridge" up
  ip -n "$ns" link set lo up
  ip -n "$ns" addr add "$net.$((10 + i))/24" dev eth0
  ip -n "$ns" link set eth0 up
}

nodes_states() { SLURM_CONF="$nodes_conf" sinfo -h -N -o '%N %T' 2>/dev/null | sort -V | tr '\n' ' '; }

start_nodes() {
  local n=$1 gpus=$2 i states
  case "$n" in ''|*[!0-9]*) die "--nodes takes a number (1-40), got '$n'" ;; esac
  { [ "$n" -ge 1 ] && [ "$n" -le 40 ]; } || die "--nodes takes 1-40, got $n"
  install_packages
  [ "$(id -u)" = 0 ] || die "starting the $n-node test Slurm needs root (network namespaces, $nodes_conf_dir)"
  command -v ip >/dev/null || die "no 'ip' (iproute2): install it to make the nodes' network namespaces"
  [ -n "$(node_names)" ] && die "the nodes' namespaces exist already ($(node_names | tr '\n' ' ')): run '$0 stop --nodes' first"
  write_nodes_config "$n" "$gpus"
  start_munge
  ip link add "$bridge" type bridge 2>/dev/null || true
  ip addr replace "$bridge_addr/24" dev "$bridge"
  ip link set "$bridge" up
  for i in $(seq 1 "$n"); do make_node "$i"; done
  pid_alive "$ctld_pid" slurmctld || slurmctld -c -i -f "$nodes_conf"
  for i in $(seq 1 "$n"); do
    # nsenter, not `ip netns exec`: that remounts /sys, without the cgroup file system
    # slurmd needs; only the network is the node's own
    nsenter --net="/run/netns/nexrl-n$i" slurmd -f "$nodes_conf" -N "nexrl-n$i"
  done
  for _ in $(seq 1 80); do
    states=$(nodes_states)
    if [ "$(echo "$states" | grep -oE 'nexrl-n[0-9]+ (idle|mix|alloc)[^ ]*' | wc -l)" = "$n" ]; then
      echo "slurm.sh: up: $n nodes (${states% }), partition debug, controller $bridge_addr:$ctld_port"
      echo "slurm.sh: export SLURM_CONF=$nodes_conf   # for sbatch/squeue/sinfo and nexrl"
      return 0
    fi
    for node in $(echo "$states" | grep -oE 'nexrl-n[0-9]+ (drain|down)' | awk '{print $1}'); do
      SLURM_CONF="$nodes_conf" scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true
    done
    sleep 0.5
  done
  die "the nodes did not become idle (${states:-no sinfo answer}); see $nodes_log/"
}

kill_namespace() {  # every process whose network is namespace $1: TERM, then KILL
  local ns=$1 pids _
  pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
  [ -n "${pids// }" ] || return 0
  kill $pids 2>/dev/null || true
  for _ in $(seq 1 20); do
    pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
    [ -n "${pids// }" ] || return 0
    sleep 0.25
  done
  kill -9 $pids 2>/dev/null || true
}

end_partitions() {  # each running 'partition' puts its node's link back (its trap) and ends
  local f pid
  for f in /run/nexrl-partition-nexrl-n*.pid; do
    [ -e "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    if partitioning "$f"; then
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 20); do partitioning "$f" || break; sleep 0.1; done
    fi
    rm -f "$f"
  done
  for f in /run/nexrl-partition-nexrl-n*.pid.watchdog; do  # one whose 'partition' was killed -9
    [ -e "$f" ] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    if [ -n "$pid" ] && tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline" | grep -q 'ip link set nexrl-v'; then
      pkill -P "$pid" 2>/dev/null || true
      kill "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
}

stop_nodes() {
  local ns pid _ any=""
  end_partitions
  if command -v scancel >/dev/null && pid_alive "$ctld_pid" slurmctld; then
    SLURM_CONF="$nodes_conf" scancel --full --signal=KILL --user="$(id -un)" >/dev/null 2>&1 || true
    SLURM_CONF="$nodes_conf" scancel --user="$(id -un)" >/dev/null 2>&1 || true
    any=1
  fi
  for ns in $(node_names); do any=1; kill_namespace "$ns"; done
  if pid_alive "$ctld_pid" slurmctld; then
    pid=$(cat "$ctld_pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do pid_alive "$ctld_pid" slurmctld || break; sleep 0.25; done
    pid_alive "$ctld_pid" slurmctld && kill -9 "$pid" 2>/dev/null || true
  fi
  for ns in $(node_names); do
    ip netns delete "$ns" 2>/dev/null || true  # takes its eth0, and with it the peer nexrl-v*
  done
  for veth in $(ip -o link show 2>/dev/null | grep -oE 'nexrl-v[0-9]+' | sort -u); do
    ip link delete "$veth" 2>/dev/null || true
  done
  if ip link show "$bridge" >/dev/null 2>&1; then
    any=1; ip link delete "$bridge" 2>/dev/null || true
  fi
  [ -n "$any" ] && echo "slurm.sh: the nodes are stopped and their namespaces removed"
  return 0
}

status_nodes() {
  if pid_alive "$ctld_pid" slurmctld && [ -n "$(node_names)" ]; then
    echo "up: $(nodes_states)(SLURM_CONF=$nodes_conf)"
  else
    echo "down"; return 1
  fi
}

node_down() {  # what a machine that fails looks like: its daemons and jobs die, its link drops
  local node=$1 i
  [[ "$node" =~ ^nexrl-n([0-9]+)$ ]] || die "node-down takes a node name like nexrl-n2, got '$node'"
  i=${BASH_REMATCH[1]}
  ip netns list | grep -qE "^$node( |$)" || die "no node $node (its namespace does not exist)"
  kill_namespace "$node"
  ip -n "$node" link set eth0 down 2>/dev/null || true
  ip link set "nexrl-v$i" down 2>/dev/null || true
  echo "slurm.sh: $node is down (slurmd and every process in it killed, its link down)"
}

partition_pid() { echo "/run/nexrl-partition-$1.pid"; }

partitioning() {  # the 'partition' process FILE names is running
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline" | grep -q 'slurm.sh partition '
}

partition() {  # a network partition: the node's link down for $2 s, its processes untouched
  # not local: the EXIT trap below runs after this function has returned
  node=$1 seconds=$2
  [[ "$node" =~ ^nexrl-n([0-9]+)$ ]] || die "partition takes a node name like nexrl-n2, got '$node'"
  veth="nexrl-v${BASH_REMATCH[1]}"
  [[ "$seconds" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "partition takes the seconds the link stays down, got '$seconds'"
  ip netns list | grep -qE "^$node( |$)" || die "no node $node (its namespace does not exist)"
  ip link show "$veth" >/dev/null 2>&1 || die "node $node has no link $veth (taken down by node-down?)"
  partitioning "$(partition_pid "$node")" && die "node $node is partitioned already (pid $(cat "$(partition_pid "$node")"))"
  echo $$ > "$(partition_pid "$node")"
  # Whatever ends this, the link comes back: at the time, on Ctrl-C, kill or the caller's
  # timeout (the trap), and even on kill -9 (a detached watchdog puts it back at the time).
  setsid bash -c "sleep $seconds; ip link set $veth up" </dev/null >/dev/null 2>&1 &
  watchdog=$!
  echo "$watchdog" > "$(partition_pid "$node").watchdog"
  trap 'ip link set "$veth" up 2>/dev/null || true; rm -f "$(partition_pid "$node")"*; pkill -P "$watchdog" 2>/dev/null; kill "$watchdog" 2>/dev/null || true' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM HUP
  # the switch's side of the cable: the node's eth0 loses its carrier and its packets
  # are dropped, in both directions; no process of the node is told (no reset, no error)
  ip link set "$veth" down
  echo "slurm.sh: $node partitioned: its link is down for ${seconds}s (its processes keep running)"
  while kill -0 "$watchdog" 2>/dev/null; do sleep 0.2; done  # (a trapped signal ends it at once)
  ip link set "$veth" up
  echo "slurm.sh: $node reconnected: its link is up again"
}

case "${1:-} ${2:-}" in
  "start --nodes") start_nodes "${3:-}" "${NEXRL_SLURM_NODE_GPUS:-1}" ;;
  "start ") start ;;
  "stop --nodes") stop_nodes ;;
  "stop ") stop ;;
  "status --nodes") status_nodes ;;
  "status ") status ;;
  "env --nodes") echo "export SLURM_CONF=$nodes_conf" ;;
  node-down\ *) node_down "${2:-}" ;;
  partition\ *) partition "${2:-}" "${3:-}" ;;
  *) die "usage: $0 start [--nodes N] | stop [--nodes] | status [--nodes] | env --nodes | node-down NAME | partition NAME SECONDS" ;;
esac
