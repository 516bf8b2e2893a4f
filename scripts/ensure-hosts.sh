#!/usr/bin/env bash
# A multi-host test bed on this one machine: `head`, compute hosts c1..cN and a `laptop`, each in
# network, UTS and mount namespaces of its own, on a private bridge; with Slurm on it (slurmctld on
# head, one slurmd per compute host, from scripts/ensure-slurm.sh). Root only. Idempotent like
# ensure-slurm.sh: `start` on a running bed with the same settings only checks it; a bed left by a
# dead run or with other settings is torn down and made again.
#
#   eval "$(scripts/ensure-hosts.sh start)"   # returns once every host is up and every Slurm node is
#                                             # idle; prints `export ...` lines (SLURM_CONF, ...)
#   scripts/ensure-hosts.sh exec HOST CMD...  # CMD on HOST (its namespaces; cwd kept where it exists)
#   scripts/ensure-hosts.sh hosts             # "NAME ADDRESS" per host
#   scripts/ensure-hosts.sh wheels FILE...    # pip-download FILE's requirements (and their dependencies)
#                                             # into the bed's wheel folder, which pip inside hosts uses
#   scripts/ensure-hosts.sh status            # exit 1 when the bed is not (fully) running
#   scripts/ensure-hosts.sh procs             # "HOST PID COMMAND" of every process on a host
#   scripts/ensure-hosts.sh link c2 down      # c2's cable pulled (its veth on the bridge down); `up` again
#   scripts/ensure-hosts.sh cut c2 head down  # c2 and head no longer reach each other (a blackhole route
#                                             # each way), every other path kept; `up` again
#   scripts/ensure-hosts.sh slurm kill-node c2   # ensure-slurm.sh ARGS with the bed's settings
#   scripts/ensure-hosts.sh stop              # every process, namespace and mount of the bed gone
#
# What a host is (docs/slurm.md, "A multi-host test bed"):
#   keeper     one `sleep infinity` per host, started by `unshare --net --uts --mount`: it holds the
#              host's namespaces, and `exec` enters them with `nsenter -t KEEPER --net --uts --mount`
#              (not `ip netns exec`, which remounts /sys and so hides the cgroup mounts slurmd needs)
#   network    eth0 = one end of a veth pair, the other on the bed's bridge br0, which lives in a
#              network namespace of its own (the "switch", a keeper too): nothing of the bed is in the
#              machine's own network namespace, and no host has a route out (no default route, and the
#              switch has no uplink); addresses in NET.0/24: head .1, cI .(10+I), laptop .100
#   names      hostname = the host's name; /etc/hosts (the bed's, bind-mounted) names every host
#   files      the machine's file system, except: /tmp, /home (HOME=/home/<user>) and
#              /var/cache/paddlecloud (the node-local dir) private per host, from DIR/hosts/NAME/;
#              /run/netns a private tmpfs (`ip netns add` inside one host is invisible elsewhere);
#              DIR/hosts hidden; SHARED (DIR/shared), the cluster file system, the same folder on
#              every host but the laptop, which sees no SHARED, no DIR and no /run/munge at all;
#              SHARED is a tmpfs for the bed's lifetime (job environments build and go fast there,
#              and `stop` ends it at once: deleting ~1.5 GB of them on this disk took ~40 s)
#   pip        inside hosts PIP_NO_INDEX=1 and PIP_FIND_LINKS=DIR/wheels: environments are built
#              offline, from what `wheels` downloaded beforehand (hosts cannot reach a registry)
#   Slurm      one munged (the machine's) serves every host; ensure-slurm.sh with PADDLECLOUD_SLURM_HOSTS
#              (the config writer is shared): slurmctld on head, `slurmd -N cI` on cI, NodeAddr = its
#              address, NodeHostname = its name, the same port on every host
#
# Settings (environment):
#   PADDLECLOUD_HOSTS_DIR      the bed's folder (default /var/lib/paddlecloud-hosts; not under /tmp,
#                              which every host replaces by its own, nor /var/tmp, which a worker's
#                              sandbox makes a link to its /tmp: the shared directory is in it)
#   PADDLECLOUD_HOSTS_NET      the first three octets of the bed's /24 (default 10.77.0)
#   PADDLECLOUD_HOSTS_COMPUTE  compute hosts (default 3)
#   PADDLECLOUD_HOSTS_SLURM    1: start Slurm on the bed (default), 0: hosts only
#   PADDLECLOUD_HOSTS_PYTHON   the interpreter whose pip `wheels` runs (default python3)
#   PADDLECLOUD_HOSTS_SHARED_SIZE  the shared tmpfs's size (default 8g; "disk": a plain folder
#                              instead, kept by `stop`)
#   PADDLECLOUD_SLURM_PORT/_CPUS/_MEM/_TIMEOUT   as for ensure-slurm.sh (here: port 6817, 8 CPUs
#                              per compute host, so two example jobs fit at once;
#                              slurmd listens on PORT + 1 on every compute host)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DIR=${PADDLECLOUD_HOSTS_DIR:-/var/lib/paddlecloud-hosts}
NET=${PADDLECLOUD_HOSTS_NET:-10.77.0}
COMPUTE=${PADDLECLOUD_HOSTS_COMPUTE:-3}
SLURM=${PADDLECLOUD_HOSTS_SLURM:-1}
PYTHON=${PADDLECLOUD_HOSTS_PYTHON:-python3}
SLURM_PORT=${PADDLECLOUD_SLURM_PORT:-6817}
SLURM_CPUS=${PADDLECLOUD_SLURM_CPUS:-8}
SHARED=$DIR/shared
SHARED_SIZE=${PADDLECLOUD_HOSTS_SHARED_SIZE:-8g}
WHEELS=$DIR/wheels
RUN=$DIR/run
MARK=PADDLECLOUD_HOSTS_KEEPER  # NAME=DIR:HOST in every keeper's environment: found even without pid files

say() { echo "ensure-hosts: $*" >&2; }
die() { say "$*"; exit 1; }

# -- the hosts ------------------------------------------------------------------------------------

compute_names() { for i in $(seq 1 "$COMPUTE"); do echo "c$i"; done; }
host_names() { echo head; compute_names; echo laptop; }

addr_of() {
  case "$1" in
    head) echo "$NET.1" ;;
    laptop) echo "$NET.100" ;;
    c[0-9]*) echo "$NET.$((10 + ${1#c}))" ;;
    *) return 1 ;;
  esac
}

is_host() { [[ " $(host_names | tr '\n' ' ') " == *" $1 "* ]]; }

settings() {  # what a running bed must have been started with to be kept
  echo "net=$NET hosts=$(host_names | tr '\n' ' ') slurm=$SLURM port=$SLURM_PORT shared=$SHARED_SIZE"
}

write_hosts() {  # the bed's /etc/hosts
  echo "127.0.0.1 localhost"
  echo "::1 localhost ip6-localhost ip6-loopback"
  for h in $(host_names); do echo "$(addr_of "$h") $h"; done
}

# -- keepers: the processes that hold each host's namespaces ---------------------------------------

keeper_pid() {  # keeper_pid NAME: the live keeper of NAME (its pid file, checked), else fail
  local pid comm state
  pid=$(cat "$RUN/$1.pid" 2>/dev/null) || return 1
  [ -n "$pid" ] && read -r _ comm state _ 2>/dev/null <"/proc/$pid/stat" || return 1
  [ "$comm" = "(sleep)" ] && [ "$state" != Z ] || return 1
  grep -qzx "$MARK=$DIR:$1" "/proc/$pid/environ" 2>/dev/null && echo "$pid"
}

marked_keepers() {  # every keeper of this bed, pid files or not (a dead run's too)
  grep -lzx -e "$MARK=$DIR:.*" /proc/[0-9]*/environ 2>/dev/null | while read -r f; do
    f=${f#/proc/}; f=${f%/environ}
    [ "$(cat "/proc/$f/comm" 2>/dev/null)" = sleep ] && echo "$f"
  done
  return 0
}

start_keeper() {  # start_keeper NAME UNSHARE-OPTIONS...: a new keeper, its pid in RUN/NAME.pid
  local name=$1 pid
  shift
  env "$MARK=$DIR:$name" setsid unshare "$@" -- sleep infinity </dev/null >/dev/null 2>&1 &
  echo $! >"$RUN/$name.pid"
  for _ in $(seq 1 50); do  # unshare has exec'd sleep once the pid's comm says so
    pid=$(keeper_pid "$name") && [ "$(readlink "/proc/$pid/ns/net")" != "$(readlink /proc/self/ns/net)" ] \
      && return 0
    sleep 0.05
  done
  die "the keeper of $name did not start (unshare $*)"
}

on() {  # on KEEPER-PID NSENTER-OPTIONS... -- CMD...: run CMD in some of a keeper's namespaces
  local pid=$1
  shift
  nsenter -t "$pid" "$@"
}

# -- making the bed ---------------------------------------------------------------------------------

make_switch() {
  start_keeper switch --net
  local sw
  sw=$(keeper_pid switch)
  on "$sw" --net -- ip link set lo up
  on "$sw" --net -- ip link add br0 type bridge
  on "$sw" --net -- ip link set br0 up
}

mountpoint_dir() {  # mkdir DIR on the machine's file system, remembering it was us (stop removes it)
  [ -d "$1" ] && return 0
  mkdir -p "$1"
  echo "$1" >>"$RUN/made-dirs"
}

checkout_under_tmp() {  # this checkout's folder when it lies under /tmp (each host replaces /tmp)
  local top
  top=$(cd "$HERE/.." && pwd -P)
  case "$top/" in /tmp/*) echo "$top" ;; esac
}

make_host() {  # make_host NAME: its keeper, mounts, hostname and network
  local name=$1 h=$DIR/hosts/$1 addr pid sw
  addr=$(addr_of "$name")
  rm -rf "$h/tmp" && mkdir -p "$h/tmp" "$h/home/$(id -un)" "$h/cache"
  chmod 1777 "$h/tmp"
  mountpoint_dir /run/netns
  mountpoint_dir /var/cache/paddlecloud
  start_keeper "$name" --net --uts --mount --propagation private
  pid=$(keeper_pid "$name")
  on "$pid" --uts -- hostname "$name"
  # the mounts, in the host's mount namespace only (private propagation: the machine sees none)
  # shellcheck disable=SC2016  # expanded by that sh, from its arguments
  on "$pid" --mount -- /bin/sh -euc '
    h=$1 dir=$2 laptop=$3 keep=$4
    # a checkout under /tmp (CI clones there) stays visible on every host: kept aside, then bound
    # back at its path inside the own /tmp of the host
    if [ -n "$keep" ]; then mkdir -p "$h/keep" && mount --bind "$keep" "$h/keep"; fi
    mount --bind "$h/tmp" /tmp
    if [ -n "$keep" ]; then mkdir -p "$keep" && mount --bind "$h/keep" "$keep"; fi
    mount --bind "$h/home" /home
    mount --bind "$h/cache" /var/cache/paddlecloud
    mount -t tmpfs -o mode=0755,size=4m netns /run/netns
    mount --bind "$dir/etc/hosts" /etc/hosts && mount -o remount,bind,ro /etc/hosts
    mount -t tmpfs -o ro,mode=0755,size=4k hidden "$dir/hosts"
    if [ "$laptop" = 1 ]; then  # outside the cluster: no cluster file system, no munge, no bed
      mount -t tmpfs -o ro,mode=0755,size=4k hidden "$dir"
      if [ -d /run/munge ]; then mount -t tmpfs -o ro,mode=0755,size=4k hidden /run/munge; fi
    fi
  ' sh "$h" "$DIR" "$([ "$name" = laptop ] && echo 1 || echo 0)" "$(checkout_under_tmp)"
  sw=$(keeper_pid switch)
  on "$sw" --net -- ip link add "v-$name" type veth peer name eth0 netns "$pid"
  on "$sw" --net -- ip link set "v-$name" master br0 up
  # shellcheck disable=SC2016  # expanded by that sh, from its arguments
  on "$pid" --net -- /bin/sh -euc '
    ip link set lo up
    ip addr add "$1/24" dev eth0
    ip link set eth0 up
  ' sh "$addr"
}

host_ok() {  # the host's keeper lives and its eth0 has its address
  local pid out
  pid=$(keeper_pid "$1") || return 1
  out=$(on "$pid" --net -- ip -o -4 addr show dev eth0 2>/dev/null) || return 1
  [[ "$out" == *" $(addr_of "$1")/24 "* ]]  # (not `| grep -q`: with pipefail, an early exit fails it)
}

shared_ok() { [ "$SHARED_SIZE" = disk ] || mountpoint -q "$SHARED"; }

mount_shared() {  # before any host exists: each host's mount namespace is a copy of the machine's
  [ "$SHARED_SIZE" = disk ] && return 0
  mount -t tmpfs -o "size=$SHARED_SIZE,mode=0755" paddlecloud-bed-shared "$SHARED"
}

umount_shared() {  # once no host holds it (their copies of the mount went with them)
  mountpoint -q "$SHARED" || return 0
  umount "$SHARED" 2>/dev/null || umount -l "$SHARED"  # lazy: a shell of someone's may sit in it
}

bed_ok() {
  keeper_pid switch >/dev/null || return 1
  shared_ok || return 1
  [ "$(settings)" = "$(cat "$RUN/settings" 2>/dev/null)" ] || return 1
  for h in $(host_names); do host_ok "$h" || return 1; done
}

# -- Slurm on the bed (scripts/ensure-slurm.sh: one config writer for both clusters) ---------------

slurm_env() {
  local nodes=""
  for c in $(compute_names); do nodes+="$c=$(addr_of "$c") "; done
  echo "PADDLECLOUD_SLURM_DIR=$DIR/slurm"
  echo "PADDLECLOUD_SLURM_PORT=$SLURM_PORT"
  echo "PADDLECLOUD_SLURM_CPUS=$SLURM_CPUS"
  echo "PADDLECLOUD_SLURM_HOSTS=${nodes% }"
  echo "PADDLECLOUD_SLURM_HEAD=head=$(addr_of head)"
  echo "PADDLECLOUD_SLURM_ON=bash $HERE/ensure-hosts.sh exec"
}

slurm_sh() {  # ensure-slurm.sh ARGS... in the bed's mode
  local -a envs
  mapfile -t envs < <(slurm_env)
  env "${envs[@]}" PADDLECLOUD_HOSTS_DIR="$DIR" PADDLECLOUD_HOSTS_NET="$NET" \
    PADDLECLOUD_HOSTS_COMPUTE="$COMPUTE" bash "$HERE/ensure-slurm.sh" "$@"
}

# -- stopping ---------------------------------------------------------------------------------------

ns_procs() {  # ns_procs PID: every other process in one of the namespaces PID does not share with
  # the machine (its net, uts, mnt: the switch has only a net namespace of its own), and every
  # descendant of those (a sandbox or a job's own namespaces are still the host's processes)
  local pid=$1 tests=() link mine matched
  for ns in net uts mnt; do
    link=$(readlink "/proc/$pid/ns/$ns" 2>/dev/null) || return 0
    mine=$(readlink "/proc/$$/ns/$ns")
    # the machine's own namespace (the script's, and init's): never a reason to kill anything
    [ "$link" = "$mine" ] || [ "$link" = "$(readlink "/proc/1/ns/$ns")" ] && continue
    link=${link//\[/\\[}; link=${link//\]/\\]}  # find's -lname takes a glob: [ ] literal
    tests+=(-o -lname "$link")
  done
  [ ${#tests[@]} -gt 0 ] || return 0
  matched=$(find /proc/[0-9]*/ns -maxdepth 1 \( -false "${tests[@]}" \) 2>/dev/null | cut -d/ -f3 | sort -u)
  [ -n "$matched" ] || return 0
  descendants "$matched" | grep -vx -e "$pid" -e 1 -e "$$" -e "${BASHPID:-$$}" || true
}

descendants() {  # descendants "PID...": those pids and all their descendants, one a line
  ps -eo pid=,ppid= | awk -v want="$(tr '\n' ' ' <<<"$1")" '
    BEGIN { n = split(want, w, / +/); for (i = 1; i <= n; i++) if (w[i] != "") keep[w[i]] = 1 }
    { parent[$1] = $2 }
    END { for (p in parent) { q = p; for (i = 0; i < 64 && q != "" && q != 0; i++) {
            if (q in keep) { print p; break }; q = parent[q] } } }' | sort -u
}

kill_host() {  # every process of keeper PID's host (SIGKILL, looked for again while any is left)
  local pid=$1 pids
  for _ in $(seq 1 10); do
    pids=$(ns_procs "$pid")
    [ -z "$pids" ] && return 0
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.2
  done
  say "processes of keeper $pid still alive after 10 rounds: ${pids//$'\n'/ }"
}

stop_bed() {
  local pids
  # Slurm first (its daemons, its jobs' processes and cgroups, its munged), whatever SLURM says now
  if [ -f "$DIR/slurm/slurm.conf" ]; then slurm_sh stop >/dev/null 2>&1 || true; fi
  for k in $(marked_keepers); do kill_host "$k"; done
  pids=$(marked_keepers | tr '\n' ' ')
  if [ -n "$pids" ]; then
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    for _ in $(seq 1 50); do [ -z "$(marked_keepers)" ] && break; sleep 0.1; done
    [ -z "$(marked_keepers)" ] || die "keepers still alive: $(marked_keepers | tr '\n' ' ')"
  fi
  umount_shared
  rm -f "$RUN"/*.pid "$RUN/settings"
  if [ -f "$RUN/made-dirs" ]; then  # the mount points `start` made on the machine, if still empty
    sort -ru "$RUN/made-dirs" | while read -r d; do rmdir "$d" 2>/dev/null || true; done
    rm -f "$RUN/made-dirs"
  fi
}

# -- commands -------------------------------------------------------------------------------------

start() {
  local t0=$SECONDS
  [ "$(id -u)" = 0 ] || die "the bed needs root (network, UTS and mount namespaces, a bridge)"
  bash "$HERE/ensure-system-packages.sh" iproute2 nftables ping >&2 \
    || die "the bed's Debian packages are missing"
  mkdir -p "$RUN" "$DIR/etc" "$SHARED" "$WHEELS"
  if ! bed_ok; then
    if [ -n "$(marked_keepers)" ]; then say "a bed with other settings or broken: making it again"; fi
    stop_bed
    mkdir -p "$RUN"
    write_hosts >"$DIR/etc/hosts"
    mount_shared
    make_switch
    for h in $(host_names); do make_host "$h"; done
    settings >"$RUN/settings"
    say "$(host_names | wc -l) hosts up after $((SECONDS - t0)) s"
  fi
  echo "export PADDLECLOUD_HOSTS_DIR=$DIR"
  echo "export PADDLECLOUD_HOSTS_SHARED=$SHARED"
  echo "export PADDLECLOUD_HOSTS_HEAD=$(addr_of head)"
  if [ "$SLURM" = 1 ]; then
    slurm_sh start || die "Slurm on the bed did not start (logs: $DIR/slurm/log/)"
  fi
  say "ready after $((SECONDS - t0)) s"
}

status() {
  local rc=0 pid
  if pid=$(keeper_pid switch); then echo "switch: pid $pid"; else echo "switch: not running"; rc=1; fi
  for h in $(host_names); do
    if host_ok "$h"; then echo "$h: $(addr_of "$h") (keeper $(keeper_pid "$h"))"; else echo "$h: down"; rc=1; fi
  done
  if [ "$SLURM" = 1 ] && [ $rc = 0 ]; then slurm_sh status || rc=1; fi
  return $rc
}

run_on() {  # exec HOST CMD...
  local name=${1:-} pid
  is_host "$name" || die "which host? one of: $(host_names | tr '\n' ' ')"
  shift
  [ $# -gt 0 ] || die "exec $name: which command?"
  pid=$(keeper_pid "$name") || die "$name is not running (scripts/ensure-hosts.sh start)"
  local user
  user=$(id -un)
  # the host's namespaces; there, the caller's cwd where the host has it, then CMD (whose environment
  # says which host it is on: the tests check that none is left after `stop`)
  # shellcheck disable=SC2016  # expanded by that sh: the cwd to keep, then the command
  exec env PADDLECLOUD_HOST="$name" PADDLECLOUD_HOSTS_DIR="$DIR" HOSTNAME="$name" HOME="/home/$user" \
    PIP_NO_INDEX=1 PIP_FIND_LINKS="$WHEELS" \
    nsenter -t "$pid" --net --uts --mount -- /bin/sh -c 'cd "$0" 2>/dev/null || cd /; exec "$@"' "$PWD" "$@"
}

wheels() {
  [ $# -gt 0 ] || die "wheels: which requirements files?"
  mkdir -p "$WHEELS"
  for f in "$@"; do  # one file at a time: each resolved on its own, as its environment will be
    # already there (as the hosts will resolve it: these wheels only)? else from the machine's indexes
    "$PYTHON" -m pip download -q --disable-pip-version-check --no-index --find-links "$WHEELS" \
      -d "$WHEELS" -r "$f" >/dev/null 2>&1 && continue
    "$PYTHON" -m pip download -q --disable-pip-version-check -d "$WHEELS" -r "$f" >&2 \
      || die "pip download -r $f failed"
  done
  say "$(find "$WHEELS" -name '*.whl' | wc -l) wheels in $WHEELS"
}

case "${1:-}" in
  start) start ;;
  stop) stop_bed; say "stopped" ;;
  status) status ;;
  exec) shift; run_on "$@" ;;
  hosts) for h in $(host_names); do echo "$h $(addr_of "$h")"; done ;;
  wheels) shift; wheels "$@" ;;
  slurm) shift; slurm_sh "$@" ;;  # ensure-slurm.sh with the bed's settings: kill-node c2, status, ...
  link)  # link HOST up|down: the host's cable (its veth's end on the bridge): a network failure
    is_host "${2:-}" && [[ "${3:-}" =~ ^(up|down)$ ]] || die "link HOST up|down (hosts: $(host_names | tr '\n' ' '))"
    sw=$(keeper_pid switch) || die "the bed is not running"
    on "$sw" --net -- ip link set "v-$2" "$3"
    say "$2: link $3"
    ;;
  cut)  # cut HOST PEER up|down: HOST and PEER lose each other only (a router between them failing)
    is_host "${2:-}" && is_host "${3:-}" && [ "$2" != "$3" ] && [[ "${4:-}" =~ ^(up|down)$ ]] \
      || die "cut HOST PEER up|down (hosts: $(host_names | tr '\n' ' '))"
    for pair in "$2 $3" "$3 $2"; do
      read -r from to <<<"$pair"
      pid=$(keeper_pid "$from") || die "the bed is not running"
      if [ "$4" = down ]; then
        on "$pid" --net -- ip route replace blackhole "$(addr_of "$to")/32"
      else
        on "$pid" --net -- ip route del blackhole "$(addr_of "$to")/32" 2>/dev/null || true
      fi
    done
    say "$2 - $3: $4"
    ;;
  procs)  # the processes of each host (what stop would end), "HOST PID COMMAND"
    for h in switch $(host_names); do
      pid=$(keeper_pid "$h") || continue
      for p in $(ns_procs "$pid"); do echo "$h $p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"; done
    done
    ;;
  *) echo "usage: $0 start|stop|status|exec HOST CMD...|hosts|procs|link HOST up|down|cut HOST PEER up|down|slurm ARGS...|wheels REQUIREMENTS..." >&2; exit 2 ;;
esac
