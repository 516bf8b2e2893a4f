#!/usr/bin/env bash
# A private Slurm cluster on this machine, for the Slurm backend's tests, the demo and the README:
# one slurmctld and N emulated nodes (`slurmd -N n1..nN`, each on its own port), its own config,
# state, spool, pid and log files under one directory. Debian's slurm-wlm + munge (installed with
# apt-get when missing, as root). Idempotent: `start` on a running cluster with the same settings
# does nothing; a cluster left by a dead run (stale pid files) or with other settings is restarted.
#
#   eval "$(scripts/ensure-slurm.sh start)"   # returns once sinfo shows every node idle; prints the
#                                             # `export ...` lines (SLURM_CONF, ...) on stdout
#   scripts/ensure-slurm.sh status            # the daemons and `sinfo`; exit 1 when slurmctld is not running
#   scripts/ensure-slurm.sh kill-node n2      # a node failure: its slurmd and every process Slurm
#                                             # started there SIGKILLed (Slurm marks it DOWN later)
#   scripts/ensure-slurm.sh revive-node n2    # its slurmd started again, the node resumed
#   scripts/ensure-slurm.sh stop              # every process it started stopped (munged included
#                                             # when this script started it)
#
# Settings (environment):
#   PADDLECLOUD_SLURM_DIR      state directory (default /tmp/paddlecloud-slurm)
#   PADDLECLOUD_SLURM_NODES    number of nodes (default 3)
#   PADDLECLOUD_SLURM_CPUS     CPUs per node (default 4)
#   PADDLECLOUD_SLURM_MEM      memory per node in MiB (default 4000)
#   PADDLECLOUD_SLURM_PORT     slurmctld's port (default 16817); node i listens on PORT + 100 + i
#   PADDLECLOUD_SLURM_TIMEOUT  SlurmdTimeout: seconds without an answer before a node is DOWN (default 10)
#   PADDLECLOUD_SLURM_GPUS     GRES GPUs per node (default 0). No GPU here: each is emulated by a
#                              character device (/dev/tty0..), so Slurm allocates and binds them
#                              (CUDA_VISIBLE_DEVICES) as it would real ones; nothing can compute on them
#
# Accounting: none (no slurmdbd, no database): the backend reads `squeue --json` and
# `scontrol show job --json`, and finished jobs stay visible for MinJobAge seconds (docs/slurm.md).
set -euo pipefail

DIR=${PADDLECLOUD_SLURM_DIR:-/tmp/paddlecloud-slurm}
NODES=${PADDLECLOUD_SLURM_NODES:-3}
CPUS=${PADDLECLOUD_SLURM_CPUS:-4}
MEM=${PADDLECLOUD_SLURM_MEM:-4000}
PORT=${PADDLECLOUD_SLURM_PORT:-16817}
TIMEOUT=${PADDLECLOUD_SLURM_TIMEOUT:-10}
GPUS=${PADDLECLOUD_SLURM_GPUS:-0}
CONF=$DIR/slurm.conf
WAIT_S=60

say() { echo "ensure-slurm: $*" >&2; }
die() { say "$*"; exit 1; }

node_names() { for i in $(seq 1 "$NODES"); do echo "n$i"; done; }

# -- packages and munge ---------------------------------------------------------------------------

install_packages() {
  local missing=()
  command -v slurmctld >/dev/null 2>&1 && command -v slurmd >/dev/null 2>&1 && command -v sbatch >/dev/null 2>&1 \
    || missing+=(slurm-wlm)
  command -v munged >/dev/null 2>&1 || missing+=(munge)
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    die "missing Debian package(s): ${missing[*]}; install them (apt-get install ${missing[*]}) or run this as root"
  fi
  say "installing ${missing[*]} (Debian packages)"
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
    || die "apt-get install ${missing[*]} failed"
  command -v slurmctld >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 \
    || die "slurm-wlm / munge still missing after apt-get install"
}

munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

ensure_munge() {
  munge_works && return 0
  [ "$(id -u)" = 0 ] || die "munged is not running and only root can start it (as root: $0 start)"
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge
  chmod 0755 /run/munge
  runuser -u munge -- /usr/sbin/munged >&2 || die "munged did not start (see /var/log/munge/munged.log)"
  cat /run/munge/munged.pid >"$DIR/run/munged.pid" 2>/dev/null || true  # ours: `stop` ends it
  for _ in $(seq 1 50); do munge_works && return 0; sleep 0.1; done
  die "munge does not work: \`munge -n | unmunge\` fails (see /var/log/munge/munged.log)"
}

# -- configuration --------------------------------------------------------------------------------

write_conf() {
  local last=$((PORT + 100 + NODES)) GRES="" GRES_TYPES=""
  if [ "$GPUS" -gt 0 ]; then GRES=" Gres=gpu:$GPUS"; GRES_TYPES=$'GresTypes=gpu\n'; fi
  cat <<EOF
# written by scripts/ensure-slurm.sh: a private cluster of $NODES emulated nodes on this machine
ClusterName=paddlecloud
SlurmctldHost=localhost
SlurmctldPort=$PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
SwitchType=switch/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# nodes claim more CPUs and memory than one machine has: take the configured ones as they are
SlurmdParameters=config_overrides
# a node that was DOWN because it stopped answering becomes usable again once its slurmd registers
ReturnToService=2
SlurmdTimeout=$TIMEOUT
MessageTimeout=5
KillWait=5
InactiveLimit=0
MinJobAge=300
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
${GRES_TYPES}NodeName=n[1-$NODES] NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((PORT + 101))-$last CPUs=$CPUS RealMemory=$MEM${GRES} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

write_gres() {  # gres.conf (beside slurm.conf, where Slurm looks): emulated GPUs, see GPUS above
  [ "$GPUS" -gt 0 ] || return 0
  echo "NodeName=n[1-$NODES] Name=gpu File=/dev/tty[0-$((GPUS - 1))]"
}

# -- processes ------------------------------------------------------------------------------------

pid_of() {  # pid_of FILE NAME: the pid in FILE when that process is alive (not a zombie) and is NAME
  local pid comm state
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && read -r _ comm state _ 2>/dev/null <"/proc/$pid/stat" || return 1
  [ "$comm" = "($2)" ] && [ "$state" != Z ] && echo "$pid"
}

ctld_pid() { pid_of "$DIR/run/slurmctld.pid" slurmctld; }
slurmd_pid() { pid_of "$DIR/run/slurmd-$1.pid" slurmd; }

# processes Slurm started on node $1: slurmstepds (they inherit PADDLECLOUD_SLURM_NODE from their
# slurmd) and every task (SLURMD_NODENAME), with their descendants
node_procs() {
  local node=$1 f
  # one grep over every process's environment (-z: NUL-separated entries, -x: whole entry)
  grep -lzx -e "PADDLECLOUD_SLURM_NODE=$node" -e "SLURMD_NODENAME=$node" /proc/[0-9]*/environ 2>/dev/null \
    | while read -r f; do
        grep -qzx -e "PADDLECLOUD_SLURM_DIR=$DIR" -e "SLURM_CONF=$CONF" "$f" 2>/dev/null || continue
        f=${f#/proc/}; f=${f%/environ}
        [ "$f" != $$ ] && [ "$f" != "$BASHPID" ] && echo "$f"
      done
  return 0
}

kill_node_procs() {  # SIGKILL the slurmd of node $1 and every process Slurm started there
  local pids
  if pid=$(slurmd_pid "$1"); then kill -KILL "$pid" 2>/dev/null || true; fi
  for _ in 1 2 3; do  # a task may fork while we look: look again
    pids=$(node_procs "$1")
    [ -z "$pids" ] && return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.2
  done
}

start_slurmd() {
  mkdir -p "$DIR/spool/$1"
  PADDLECLOUD_SLURM_NODE=$1 PADDLECLOUD_SLURM_DIR=$DIR SLURM_CONF=$CONF slurmd -f "$CONF" -N "$1" >&2 \
    || die "slurmd -N $1 did not start (see $DIR/log/slurmd-$1.log)"
}

all_idle() {  # every node responds and is idle (or busy with jobs), none down or drained
  local states
  states=$(SLURM_CONF=$CONF sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
  [ "$(wc -l <<<"$states")" -eq "$NODES" ] || return 1
  ! grep -Evq ' (idle|mix|alloc)$' <<<"$states"
}

exports() {
  echo "export SLURM_CONF=$CONF"
  echo "export PADDLECLOUD_SLURM_DIR=$DIR"
}

stop_slurm() {
  local pid
  for node in $(node_names); do kill_node_procs "$node"; done
  if pid=$(ctld_pid); then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$DIR"/run/slurm*.pid
}

stop_all() {  # the cluster, and munged when this script started it
  local pid
  stop_slurm
  if pid=$(pid_of "$DIR/run/munged.pid" munged); then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$DIR/run/munged.pid"
}

start() {
  local t0=$SECONDS pid
  install_packages
  mkdir -p "$DIR/run" "$DIR/log" "$DIR/state" "$DIR/spool"
  ensure_munge
  if [ "$(write_conf)" != "$(cat "$CONF" 2>/dev/null)" ]; then
    ctld_pid >/dev/null && say "settings changed: restarting the cluster"
    stop_slurm
    write_conf >"$CONF"
  fi
  write_gres >"$DIR/gres.conf"
  if ! ctld_pid >/dev/null; then
    # a fresh controller (no jobs of a dead run) and fresh nodes
    for node in $(node_names); do kill_node_procs "$node"; done
    rm -rf "$DIR/state" "$DIR/spool" && mkdir -p "$DIR/state" "$DIR/spool"
    SLURM_CONF=$CONF slurmctld -f "$CONF" -c >&2 || die "slurmctld did not start (see $DIR/log/slurmctld.log)"
  fi
  for node in $(node_names); do
    slurmd_pid "$node" >/dev/null || start_slurmd "$node"
  done
  while [ $((SECONDS - t0)) -lt "$WAIT_S" ]; do
    if all_idle; then
      say "$NODES nodes idle after $((SECONDS - t0)) s (SLURM_CONF=$CONF)"
      exports
      return 0
    fi
    sleep 0.2
  done
  SLURM_CONF=$CONF sinfo -N >&2 || true
  die "the nodes are not idle after ${WAIT_S} s (logs: $DIR/log/)"
}

status() {  # exit 0 while the controller runs (a node may be down: sinfo says so), 1 when not
  local pid
  for node in $(node_names); do
    if pid=$(slurmd_pid "$node"); then echo "slurmd $node: running (pid $pid)"; else echo "slurmd $node: not running"; fi
  done
  if ! pid=$(ctld_pid); then echo "slurmctld: not running"; return 1; fi
  echo "slurmctld: running (pid $pid)"
  SLURM_CONF=$CONF sinfo -N || true
}

node_arg() {
  [ -n "${1:-}" ] && node_names | grep -x -- "$1" >/dev/null || die "which node? one of: $(node_names | tr '\n' ' ')"
}

case "${1:-}" in
  start) start ;;
  stop) stop_all; say "stopped" ;;
  status) status ;;
  kill-node) node_arg "${2:-}"; kill_node_procs "$2"; say "$2: slurmd and its jobs' processes killed" ;;
  revive-node)
    node_arg "${2:-}"
    slurmd_pid "$2" >/dev/null || start_slurmd "$2"
    t0=$SECONDS
    while [ $((SECONDS - t0)) -lt "$WAIT_S" ]; do
      SLURM_CONF=$CONF scontrol update nodename="$2" state=resume >/dev/null 2>&1 || true
      state=$(SLURM_CONF=$CONF sinfo -h -n "$2" -o '%t' 2>/dev/null || true)
      case "$state" in idle|mix|alloc) say "$2: $state"; exit 0 ;; esac
      sleep 0.2
    done
    die "$2 is not back after ${WAIT_S} s (state: ${state:-?}; log: $DIR/log/slurmd-$2.log)"
    ;;
  *) echo "usage: $0 start|stop|status|kill-node NODE|revive-node NODE" >&2; exit 2 ;;
esac
