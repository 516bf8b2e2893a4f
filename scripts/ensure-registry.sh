#!/usr/bin/env bash
# The container-image test bed (issue 27): two instances of the reference OCI registry (Debian's
# docker-registry) on 127.0.0.1, and a small base image made from Debian packages, pushed to both.
#
#   eval "$(scripts/ensure-registry.sh start)"   # returns once both answer /v2/; prints on stdout:
#       PADDLECLOUD_REGISTRY          127.0.0.1:PORT, open (no credentials)
#       PADDLECLOUD_PRIVATE_REGISTRY  127.0.0.1:PORT+1, every request needs PADDLECLOUD_PRIVATE_USER /
#                                     PADDLECLOUD_PRIVATE_PASSWORD (basic auth, an htpasswd file)
#       PADDLECLOUD_TEST_IMAGE        REGISTRY/paddlecloud-test/base:IMAGE_VERSION on the open registry
#       PADDLECLOUD_PRIVATE_IMAGE     the same image on the private one
#   scripts/ensure-registry.sh status   # exit 1 when a registry does not answer
#   scripts/ensure-registry.sh stop     # both registries stopped (their storage and the image cache stay)
#
# The base image: Debian 12 (mmdebstrap --variant=essential) with python3 (and `python`) and one file the host
# lacks, /etc/paddlecloud-image (so a test can tell that a worker ran inside it). mmdebstrap reads
# the host's own apt sources; the result is kept as an OCI layout in the cache directory (umoci: one
# layer, the image's config) and built again only when this script's IMAGE_VERSION changes. skopeo
# pushes it. Idempotent: `start` with both registries up and the image pushed does nothing.
#
# Settings (environment):
#   PADDLECLOUD_REGISTRY_DIR    state: config, storage, pid and log files (default /tmp/paddlecloud-registry)
#   PADDLECLOUD_REGISTRY_PORT   the open registry's port (default 5000); the private one's is PORT + 1
#   PADDLECLOUD_IMAGE_CACHE     the base image's OCI layout (default /var/cache/paddlecloud-images)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dir=${PADDLECLOUD_REGISTRY_DIR:-/tmp/paddlecloud-registry}
port=${PADDLECLOUD_REGISTRY_PORT:-5000}
cache=${PADDLECLOUD_IMAGE_CACHE:-/var/cache/paddlecloud-images}
user=paddlecloud-test
password=not-a-secret-test-password
IMAGE_VERSION=2  # change it when the image's recipe below changes: the cache is rebuilt
repo=paddlecloud-test/base

log() { echo "ensure-registry: $*" >&2; }

answers() {  # answers PORT [USER:PASSWORD]: the registry's /v2/ says 200
  local auth=()
  [ -n "${2:-}" ] && auth=(-u "$2")
  [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "${auth[@]}" "http://127.0.0.1:$1/v2/")" = 200 ]
}

config() {  # config NAME PORT [htpasswd]: a registry's config file
  local name=$1 p=$2
  mkdir -p "$dir/$name/storage"
  {
    echo "version: 0.1"
    echo "log: {level: warn}"
    echo "storage:"
    echo "  filesystem: {rootdirectory: $dir/$name/storage}"
    echo "  delete: {enabled: true}"
    echo "http: {addr: 127.0.0.1:$p, secret: paddlecloud-test-$name}"
    if [ $# -gt 2 ]; then
      echo "auth:"
      echo "  htpasswd: {realm: paddlecloud-test, path: $dir/$name/htpasswd}"
    fi
  } > "$dir/$name/config.yml"
}

start_one() {  # start_one NAME PORT [USER:PASSWORD]
  local name=$1 p=$2 cred=${3:-}
  answers "$p" "$cred" && return
  if [ -f "$dir/$name/pid" ] && kill -0 "$(cat "$dir/$name/pid")" 2>/dev/null; then
    kill "$(cat "$dir/$name/pid")" 2>/dev/null || true
  fi
  setsid docker-registry serve "$dir/$name/config.yml" >> "$dir/$name/log" 2>&1 < /dev/null &
  echo $! > "$dir/$name/pid"
  for _ in $(seq 1 100); do
    answers "$p" "$cred" && return
    sleep 0.1
  done
  log "the $name registry did not answer on 127.0.0.1:$p (log: $dir/$name/log)"
  tail -5 "$dir/$name/log" >&2 || true
  exit 1
}

build_image() {  # the base image's OCI layout in $cache/base-$IMAGE_VERSION (once)
  local layout="$cache/base-$IMAGE_VERSION"
  [ -f "$layout/done" ] && return
  log "building the base image from Debian packages (mmdebstrap; once per machine)"
  rm -rf "$cache"/base-* "$cache/work"  # an earlier recipe's image goes
  mkdir -p "$cache/work"
  mmdebstrap --quiet --variant=essential --include=python3,python-is-python3 \
    --customize-hook='echo "built for the PaddleCloud image tests" > "$1/etc/paddlecloud-image"' \
    bookworm "$cache/work/rootfs.tar" - < /etc/apt/sources.list.d/debian.sources >&2
  umoci init --layout "$layout"
  umoci new --image "$layout:base"
  umoci raw add-layer --image "$layout:base" "$cache/work/rootfs.tar"
  umoci config --image "$layout:base" --config.cmd=/usr/bin/python3 \
    --config.env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --config.workingdir=/ --author="PaddleCloud tests"
  umoci gc --layout "$layout"
  rm -rf "$cache/work"
  touch "$layout/done"
}

push() {  # push PORT [USER:PASSWORD]: the base image on that registry (once)
  local p=$1 creds=()
  [ $# -gt 1 ] && creds=(--dest-creds "$2")
  local target="docker://127.0.0.1:$p/$repo:$IMAGE_VERSION"
  if [ $# -gt 1 ]; then
    skopeo inspect --tls-verify=false --creds "$2" "$target" >/dev/null 2>&1 && return
  else
    skopeo inspect --tls-verify=false "$target" >/dev/null 2>&1 && return
  fi
  skopeo copy --quiet --dest-tls-verify=false "${creds[@]}" "oci:$cache/base-$IMAGE_VERSION:base" "$target" >&2
}

exports() {
  echo "export PADDLECLOUD_REGISTRY=127.0.0.1:$port"
  echo "export PADDLECLOUD_PRIVATE_REGISTRY=127.0.0.1:$((port + 1))"
  echo "export PADDLECLOUD_TEST_IMAGE=127.0.0.1:$port/$repo:$IMAGE_VERSION"
  echo "export PADDLECLOUD_PRIVATE_IMAGE=127.0.0.1:$((port + 1))/$repo:$IMAGE_VERSION"
  echo "export PADDLECLOUD_PRIVATE_USER=$user"
  echo "export PADDLECLOUD_PRIVATE_PASSWORD=$password"
}

case "${1:-}" in
  start)
    bash "$here/ensure-system-packages.sh" images >&2
    mkdir -p "$dir" "$cache"
    config open "$port"
    config private "$((port + 1))" htpasswd
    if [ ! -s "$dir/private/htpasswd" ]; then
      hash=$(python3 -W ignore -c 'import crypt, sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH)))' "$password")
      echo "$user:$hash" > "$dir/private/htpasswd"
    fi
    start_one open "$port"
    start_one private "$((port + 1))" "$user:$password"
    build_image
    push "$port"
    push "$((port + 1))" "$user:$password"
    exports
    ;;
  status)
    ok=0
    answers "$port" && echo "open registry: 127.0.0.1:$port" || { echo "open registry: down"; ok=1; }
    answers "$((port + 1))" "$user:$password" && echo "private registry: 127.0.0.1:$((port + 1))" \
      || { echo "private registry: down"; ok=1; }
    exit $ok
    ;;
  stop)
    for name in open private; do
      if [ -f "$dir/$name/pid" ]; then
        kill "$(cat "$dir/$name/pid")" 2>/dev/null || true
        rm -f "$dir/$name/pid"
      fi
    done
    ;;
  *)
    echo "usage: $0 start|status|stop" >&2
    exit 2
    ;;
esac
