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
#   scripts/ensure-slurm.sh stop              # every process it started stopped (its own munged
#                                             # included: each cluster runs one, see ensure_munge)
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
# On hosts (the multi-host test bed: scripts/ensure-hosts.sh sets these), nodes are hosts of their
# own instead of `slurmd -N` emulations on this machine's loopback:
#   PADDLECLOUD_SLURM_HOSTS    "c1=10.77.0.11 c2=10.77.0.12 ...": one node per host, NodeHostname =
#                              its name, NodeAddr = its address, every slurmd on port PORT + 1
#   PADDLECLOUD_SLURM_HEAD     "head=10.77.0.1": slurmctld's host (SlurmctldHost=head(10.77.0.1))
#   PADDLECLOUD_SLURM_ON       how to run a command on a host: "$ON HOST CMD..." (the daemons, and
#                              every Slurm client command: only the hosts reach slurmctld)
#
# Limits: TaskPlugin=task/cgroup + ProctrackType=proctrack/cgroup with a cgroup.conf beside
# slurm.conf: a job's memory is its --mem (ConstrainRAMSpace: over it the kernel OOM-kills inside
# the job's cgroup and Slurm ends the job OUT_OF_MEMORY), no swap beyond it (ConstrainSwapSpace),
# GRES devices only those allocated (ConstrainDevices), and every process of a job, wherever it
# went in the process tree, in the job's freezer cgroup (Slurm kills them all at its end). Not
# cores: the nodes claim more CPUs than the machine has, and cpusets of CPUs that do not exist
# cannot be made (ConstrainCores=no; docs/slurm.md). Emulated nodes of clusters side by side on one
# machine share cgroup folders (slurm_n1/uid_0/job_ID), so each cluster numbers its jobs from a
# FirstJobId of its own (from PORT).
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
HOSTS=${PADDLECLOUD_SLURM_HOSTS:-}
HEAD=${PADDLECLOUD_SLURM_HEAD:-}
read -ra ON <<<"${PADDLECLOUD_SLURM_ON:-}"
CONF=$DIR/slurm.conf
MUNGE=$DIR/munge
WAIT_S=60
if [ -n "$HOSTS" ]; then
  if [ -z "$HEAD" ] || [ ${#ON[@]} -eq 0 ]; then
    echo "ensure-slurm: PADDLECLOUD_SLURM_HOSTS needs PADDLECLOUD_SLURM_HEAD and _ON" >&2
    exit 2
  fi
  NODES=$(wc -w <<<"$HOSTS")
fi
#: this cluster's jobs are numbered from here: clusters side by side never share a job id (and so
#: never a job's cgroup folder); ids stay below Slurm's MaxJobId (67,043,328)
FIRST_JOB=$(((PORT % 6700) * 10000 + 1))

say() { echo "ensure-slurm: $*" >&2; }
die() { say "$*"; exit 1; }

node_names() {
  if [ -n "$HOSTS" ]; then for h in $HOSTS; do echo "${h%%=*}"; done; return 0; fi
  for i in $(seq 1 "$NODES"); do echo "n$i"; done
}

# on_node NODE CMD...: CMD where NODE's slurmd runs; ctl CMD...: where slurmctld runs (both here
# without hosts). Every Slurm client command goes through ctl: on the bed only its hosts reach it.
on_node() {
  local node=$1
  shift
  if [ -n "$HOSTS" ]; then "${ON[@]}" "$node" "$@"; else "$@"; fi
}
ctl() { if [ -n "$HOSTS" ]; then "${ON[@]}" "${HEAD%%=*}" "$@"; else "$@"; fi; }

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

# a munged of this cluster's own (its socket in MUNGE, named in slurm.conf's AuthInfo): clusters
# side by side never stop each other's, and `stop` ends it; the key is the machine's
munge_works() { munge -S "$MUNGE/socket" -n 2>/dev/null | unmunge -S "$MUNGE/socket" >/dev/null 2>&1; }

ensure_munge() {
  munge_works && return 0
  [ "$(id -u)" = 0 ] || die "this cluster's munged is not running and only root can start it (as root: $0 start)"
  if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  fi
  chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
  if pid=$(pid_of "$MUNGE/munged.pid" munged); then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -rf "$MUNGE" && mkdir -p "$MUNGE" && chown munge:munge "$MUNGE" && chmod 0755 "$MUNGE"
  runuser -u munge -- /usr/sbin/munged --socket="$MUNGE/socket" --pid-file="$MUNGE/munged.pid" \
    --log-file="$MUNGE/munged.log" --seed-file="$MUNGE/munged.seed" >&2 \
    || die "munged did not start (see $MUNGE/munged.log)"
  for _ in $(seq 1 50); do munge_works && return 0; sleep 0.1; done
  die "munge does not work: \`munge -S $MUNGE/socket -n | unmunge -S ...\` fails (see $MUNGE/munged.log)"
}

# -- configuration --------------------------------------------------------------------------------

node_lines() {  # the NodeName lines: emulated nodes on loopback, or one node per host
  local last=$((PORT + 100 + NODES)) gres=""
  if [ "$GPUS" -gt 0 ]; then gres=" Gres=gpu:$GPUS"; fi
  if [ -z "$HOSTS" ]; then
    echo "NodeName=n[1-$NODES] NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((PORT + 101))-$last CPUs=$CPUS RealMemory=$MEM${gres} State=UNKNOWN"
    return 0
  fi
  for h in $HOSTS; do
    echo "NodeName=${h%%=*} NodeHostname=${h%%=*} NodeAddr=${h#*=} Port=$((PORT + 1)) CPUs=$CPUS RealMemory=$MEM${gres} State=UNKNOWN"
  done
}

write_conf() {
  local GRES_TYPES="" where="emulated nodes on this machine" ctld=localhost
  if [ "$GPUS" -gt 0 ]; then GRES_TYPES=$'GresTypes=gpu\n'; fi
  if [ -n "$HOSTS" ]; then where="hosts of the test bed (scripts/ensure-hosts.sh)" ctld="${HEAD%%=*}(${HEAD#*=})"; fi
  cat <<EOF
# written by scripts/ensure-slurm.sh: a private cluster of $NODES $where
ClusterName=paddlecloud
SlurmctldHost=$ctld
SlurmctldPort=$PORT
FirstJobId=$FIRST_JOB
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE/socket
MpiDefault=none
SwitchType=switch/none
# limits and process tracking by cgroups (cgroup.conf): see the header
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
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
${GRES_TYPES}$(node_lines)
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

write_gres() {  # gres.conf (beside slurm.conf, where Slurm looks): emulated GPUs, see GPUS above
  [ "$GPUS" -gt 0 ] || return 0
  echo "NodeName=$(node_names | paste -sd,) Name=gpu File=/dev/tty[0-$((GPUS - 1))]"
}

write_cgroup() {  # cgroup.conf (beside slurm.conf, where Slurm looks): the limits, see the header
  echo "# written by scripts/ensure-slurm.sh"
  if [ -d /sys/fs/cgroup/memory ] && [ -d /sys/fs/cgroup/freezer ]; then
    echo "CgroupPlugin=cgroup/v1"  # this machine: v1 controllers under /sys/fs/cgroup/<controller>
  else
    echo "CgroupPlugin=cgroup/v2"  # a cgroup v2 only host (not tried here: none was at hand)
    [ -d /run/systemd/system ] || echo "IgnoreSystemd=yes"  # no systemd to ask for a scope
  fi
  echo "ConstrainRAMSpace=yes"
  echo "ConstrainSwapSpace=yes"
  echo "ConstrainDevices=yes"
  echo "ConstrainCores=no"
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
# slurmd) and every task (SLURMD_NODENAME), with their descendants. On hosts (PADDLECLOUD_SLURM_HOSTS)
# also PADDLECLOUD_HOST, which `ensure-hosts.sh exec` gives everything it starts on a host: a
# slurmstepd's title overwrites the first entries of its environment block (setproctitle), and
# there those were PADDLECLOUD_SLURM_NODE and _DIR, so a stepd was missed, outlived its task and
# told slurmctld "WTERMSIG 9" (a failed job, not the NODE_FAIL of a node that died)
node_procs() {
  local node=$1 f host=()
  [ -n "$HOSTS" ] && host=(-e "PADDLECLOUD_HOST=$node")
  # one grep over every process's environment (-z: NUL-separated entries, -x: whole entry)
  grep -lzx -e "PADDLECLOUD_SLURM_NODE=$node" -e "SLURMD_NODENAME=$node" "${host[@]}" /proc/[0-9]*/environ 2>/dev/null \
    | while read -r f; do
        grep -qzx -e "PADDLECLOUD_SLURM_DIR=$DIR" -e "SLURM_CONF=$CONF" "$f" 2>/dev/null || continue
        f=${f#/proc/}; f=${f%/environ}
        [ "$f" != $$ ] && [ "$f" != "$BASHPID" ] && echo "$f"
      done
  return 0
}

kill_node_procs() {  # SIGKILL the slurmd of node $1 and every process Slurm started there
  # Stopped first, all of them, then killed: a real node's failure ends its processes at once, while
  # one kill after another let a launcher see its program die of the broken log pipe of a monitor
  # killed before it, and write exit status 1 (a loaded machine: the worker read Failed, not Lost)
  local pids held=""
  if pid=$(slurmd_pid "$1"); then kill -STOP "$pid" 2>/dev/null || true; held=$pid; fi
  for _ in 1 2 3; do  # a task may fork while we look: look again
    pids=$(node_procs "$1")
    [ -z "$pids" ] && break
    # shellcheck disable=SC2086
    kill -STOP $pids 2>/dev/null || true
    held="$held $pids"
    sleep 0.1
  done
  # shellcheck disable=SC2086
  [ -n "$held" ] && kill -KILL $held 2>/dev/null || true
  for _ in 1 2 3; do  # anything started meanwhile
    pids=$(node_procs "$1")
    [ -z "$pids" ] && return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.2
  done
}

start_slurmd() {
  mkdir -p "$DIR/spool/$1"
  PADDLECLOUD_SLURM_NODE=$1 PADDLECLOUD_SLURM_DIR=$DIR SLURM_CONF=$CONF on_node "$1" slurmd -f "$CONF" -N "$1" >&2 \
    || die "slurmd -N $1 did not start (see $DIR/log/slurmd-$1.log)"
}

job_cgroups() {  # the cgroup folders of this cluster's jobs on node $1 (its id range), deepest first
  local d id
  for d in /sys/fs/cgroup/*/slurm_"$1"/uid_*/job_*; do
    [ -d "$d" ] || continue
    id=${d##*/job_}
    { [ "$id" -ge "$FIRST_JOB" ] && [ "$id" -lt $((FIRST_JOB + 10000)) ]; } 2>/dev/null || continue
    find "$d" -depth -type d
  done
}

remove_cgroups() {  # what the jobs of a killed node left of their cgroups: empty folders (rmdir
  # only); slurm_NODE and uid_* too unless another cluster's job is in them (Slurm makes them again)
  local d
  job_cgroups "$1" | while read -r d; do rmdir "$d" 2>/dev/null || true; done
  for d in /sys/fs/cgroup/*/slurm_"$1"/uid_* /sys/fs/cgroup/*/slurm_"$1"; do
    if [ -d "$d" ]; then rmdir "$d" 2>/dev/null || true; fi
  done
}

all_idle() {  # every node responds and is idle (or busy with jobs), none down or drained
  local states
  states=$(SLURM_CONF=$CONF ctl sinfo -h -N -o '%N %t' 2>/dev/null) || return 1
  [ "$(wc -l <<<"$states")" -eq "$NODES" ] || return 1
  ! grep -Evq ' (idle|mix|alloc)$' <<<"$states"
}

exports() {
  echo "export SLURM_CONF=$CONF"
  echo "export PADDLECLOUD_SLURM_DIR=$DIR"
}

remove_job_netns() {  # the jobs' network namespaces the runs here left (nodekeep.py: pcs-*), when empty
  command -v ip >/dev/null 2>&1 || return 0
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '/^pcs-/ {print $1}'); do
    if [ -z "$(ip netns pids "$ns" 2>/dev/null)" ]; then ip netns delete "$ns" 2>/dev/null || true; fi
  done
}

stop_slurm() {
  local pid
  for node in $(node_names); do kill_node_procs "$node"; done
  if pid=$(ctld_pid); then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  for node in $(node_names); do remove_cgroups "$node"; done
  remove_job_netns
  rm -f "$DIR"/run/slurm*.pid
}

stop_all() {  # the cluster and its munged
  local pid
  stop_slurm
  if pid=$(pid_of "$MUNGE/munged.pid" munged); then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
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
  if [ "$(write_cgroup)" != "$(cat "$DIR/cgroup.conf" 2>/dev/null)" ]; then
    ctld_pid >/dev/null && say "cgroup.conf changed: restarting the cluster"
    stop_slurm
    write_cgroup >"$DIR/cgroup.conf"
  fi
  if ! ctld_pid >/dev/null; then
    # a fresh controller (no jobs of a dead run) and fresh nodes
    for node in $(node_names); do kill_node_procs "$node"; remove_cgroups "$node"; done
    rm -rf "$DIR/state" "$DIR/spool" && mkdir -p "$DIR/state" "$DIR/spool"
    SLURM_CONF=$CONF ctl slurmctld -f "$CONF" -c >&2 || die "slurmctld did not start (see $DIR/log/slurmctld.log)"
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
  SLURM_CONF=$CONF ctl sinfo -N >&2 || true
  die "the nodes are not idle after ${WAIT_S} s (logs: $DIR/log/)"
}

status() {  # exit 0 while the controller runs (a node may be down: sinfo says so), 1 when not
  local pid
  for node in $(node_names); do
    if pid=$(slurmd_pid "$node"); then echo "slurmd $node: running (pid $pid)"; else echo "slurmd $node: not running"; fi
  done
  if ! pid=$(ctld_pid); then echo "slurmctld: not running"; return 1; fi
  echo "slurmctld: running (pid $pid)"
  SLURM_CONF=$CONF ctl sinfo -N || true
}

node_arg() {
  [ -n "${1:-}" ] && node_names | grep -x -- "$1" >/dev/null || die "which node? one of: $(node_names | tr '\n' ' ')"
}

case "${1:-}" in
  start) start ;;
  stop) stop_all; say "stopped" ;;
  status) status ;;
  kill-node) node_arg "${2:-}"; kill_node_procs "$2"; remove_cgroups "$2"; say "$2: slurmd and its jobs' processes killed" ;;
  revive-node)
    node_arg "${2:-}"
    slurmd_pid "$2" >/dev/null || start_slurmd "$2"
    t0=$SECONDS
    while [ $((SECONDS - t0)) -lt "$WAIT_S" ]; do
      SLURM_CONF=$CONF ctl scontrol update nodename="$2" state=resume >/dev/null 2>&1 || true
      state=$(SLURM_CONF=$CONF ctl sinfo -h -n "$2" -o '%t' 2>/dev/null || true)
      case "$state" in idle|mix|alloc) say "$2: $state"; exit 0 ;; esac
      sleep 0.2
    done
    die "$2 is not back after ${WAIT_S} s (state: ${state:-?}; log: $DIR/log/slurmd-$2.log)"
    ;;
  *) echo "usage: $0 start|stop|status|kill-node NODE|revive-node NODE" >&2; exit 2 ;;
esac
