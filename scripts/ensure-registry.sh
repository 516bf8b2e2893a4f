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
#   eval "$(scripts/ensure-registry.sh train)"   # `start`, and the training image pushed to the open
#       registry (built once per machine: a few minutes); prints also
#       PADDLECLOUD_TRAIN_IMAGE       REGISTRY/paddlecloud-test/train:IMAGE_VERSION.TRAIN_VERSION
#   scripts/ensure-registry.sh build    # only the cached images (no registry): where `start` cannot
#                                       # reach the package mirrors (inside the hosts bed)
#   scripts/ensure-registry.sh status   # exit 1 when a registry does not answer
#   scripts/ensure-registry.sh stop     # both registries stopped (their storage and the image cache stay)
#
# The base image: Debian 12 (mmdebstrap --variant=essential) with python3 (and `python`), the C++
# and OpenMP runtimes (the frameworks' wheels need them) and one file the host lacks,
# /etc/paddlecloud-image (so a test can tell that a worker ran inside it). mmdebstrap reads
# the host's own apt sources; the result is kept as an OCI layout in the cache directory (umoci: one
# layer, the image's config) and built again only when this script's IMAGE_VERSION changes. skopeo
# pushes it. Idempotent: `start` with both registries up and the image pushed does nothing.
#
# The training image: the base image and one more layer, what an NGC-style image carries: torch
# (CPU), PaddlePaddle, numpy, protobuf and setuptools, installed by pip (this machine's, for the
# image's Python 3.11) into the image's /usr/local/lib/python3.11/dist-packages, where its python3
# finds them (about 1.3 GB unpacked). examples/fit_a_line and examples/torch_ddp run in it with
# their requirements already met.
#
# Settings (environment):
#   PADDLECLOUD_REGISTRY_DIR    state: config, storage, pid and log files (default /tmp/paddlecloud-registry)
#   PADDLECLOUD_REGISTRY_PORT   the open registry's port (default 5000); the private one's is PORT + 1
#   PADDLECLOUD_REGISTRY_HOST   the address both listen on (default 127.0.0.1; the hosts bed's tests
#                               start them inside its head host, on head's address)
#   PADDLECLOUD_IMAGE_CACHE     the base image's OCI layout (default /var/cache/paddlecloud-images)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
dir=${PADDLECLOUD_REGISTRY_DIR:-/tmp/paddlecloud-registry}
port=${PADDLECLOUD_REGISTRY_PORT:-5000}
host=${PADDLECLOUD_REGISTRY_HOST:-127.0.0.1}
cache=${PADDLECLOUD_IMAGE_CACHE:-/var/cache/paddlecloud-images}
user=paddlecloud-test
password=not-a-secret-test-password
IMAGE_VERSION=3  # change it when the image's recipe below changes: the cache is rebuilt
TRAIN_VERSION=2  # the same for the training image's recipe
TRAIN_PACKAGES=("torch==2.13.0" "paddlepaddle==2.6.2" "numpy<2" "protobuf>=4.21,<5" "setuptools<85")
repo=paddlecloud-test/base

log() { echo "ensure-registry: $*" >&2; }

answers() {  # answers PORT [USER:PASSWORD]: the registry's /v2/ says 200
  local auth=()
  [ -n "${2:-}" ] && auth=(-u "$2")
  [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 "${auth[@]}" "http://$host:$1/v2/")" = 200 ]
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
    echo "http: {addr: $host:$p, secret: paddlecloud-test-$name}"
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
  # (9>&-: the registry must not hold the cache's lock, which it would inherit)
  setsid docker-registry serve "$dir/$name/config.yml" >> "$dir/$name/log" 2>&1 < /dev/null 9>&- &
  echo $! > "$dir/$name/pid"
  for _ in $(seq 1 100); do
    answers "$p" "$cred" && return
    sleep 0.1
  done
  log "the $name registry did not answer on $host:$p (log: $dir/$name/log)"
  tail -5 "$dir/$name/log" >&2 || true
  exit 1
}

build_image() {  # the base image's OCI layout in $cache/base-$IMAGE_VERSION (once)
  local layout="$cache/base-$IMAGE_VERSION"
  [ -f "$layout/done" ] && return
  log "building the base image from Debian packages (mmdebstrap; once per machine)"
  rm -rf "$cache"/base-* "$cache/work"  # an earlier recipe's image goes
  mkdir -p "$cache/work"
  mmdebstrap --quiet --variant=essential --include=python3,python-is-python3,libstdc++6,libgomp1 \
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

build_train() {  # the training image's OCI layout in $cache/train-$IMAGE_VERSION.$TRAIN_VERSION (once)
  local layout="$cache/train-$IMAGE_VERSION.$TRAIN_VERSION" work="$cache/train-work"
  [ -f "$layout/done" ] && return
  log "building the training image (torch, PaddlePaddle; once per machine)"
  rm -rf "$cache"/train-*
  mkdir -p "$work/stage/usr/local/lib/python3.11/dist-packages"
  skopeo copy --quiet "oci:$cache/base-$IMAGE_VERSION:base" "oci:$layout:train" >&2
  "${PYTHON:-python3}" -m pip install --quiet --disable-pip-version-check --no-input \
    --target "$work/stage/usr/local/lib/python3.11/dist-packages" "${TRAIN_PACKAGES[@]}" >&2
  # the packages' scripts (torchrun) where an image has them, run by the image's python3
  mv "$work/stage/usr/local/lib/python3.11/dist-packages/bin" "$work/stage/usr/local/bin"
  sed -i '1s|^#!.*python.*$|#!/usr/bin/python3|' "$work/stage/usr/local/bin"/*
  tar -C "$work/stage" -cf "$work/layer.tar" usr
  umoci raw add-layer --image "$layout:train" "$work/layer.tar"
  umoci config --image "$layout:train" --author="PaddleCloud tests" \
    --config.label=org.paddlecloud.test=train
  umoci gc --layout "$layout"
  rm -rf "$work"
  touch "$layout/done"
}

push() {  # push PORT [USER:PASSWORD [NAME TAG]]: an image on that registry (once; the base image)
  local p=$1 creds=() name=${3:-base} tag=${4:-$IMAGE_VERSION}
  [ $# -gt 1 ] && [ -n "$2" ] && creds=(--dest-creds "$2")
  local target="docker://$host:$p/paddlecloud-test/$name:$tag"
  local there=() want
  [ ${#creds[@]} -gt 0 ] && there=(--creds "$2")
  want=$(skopeo inspect --format '{{.Digest}}' "oci:$cache/$name-$tag:$name")
  # pushed already when the registry has the same manifest (a rebuilt image is pushed again)
  [ "$(skopeo inspect --tls-verify=false "${there[@]}" --format '{{.Digest}}' "$target" 2>/dev/null)" = "$want" ] \
    && return
  skopeo copy --quiet --dest-tls-verify=false "${creds[@]}" "oci:$cache/$name-$tag:$name" "$target" >&2
}

exports() {
  echo "export PADDLECLOUD_REGISTRY=$host:$port"
  echo "export PADDLECLOUD_PRIVATE_REGISTRY=$host:$((port + 1))"
  echo "export PADDLECLOUD_TEST_IMAGE=$host:$port/$repo:$IMAGE_VERSION"
  echo "export PADDLECLOUD_PRIVATE_IMAGE=$host:$((port + 1))/$repo:$IMAGE_VERSION"
  echo "export PADDLECLOUD_PRIVATE_USER=$user"
  echo "export PADDLECLOUD_PRIVATE_PASSWORD=$password"
}

case "${1:-}" in
  start | train)
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
    exec 9>>"$cache/.lock"
    flock 9  # one build of the cached images at a time (two beds, on other ports, may start at once)
    build_image
    if [ "$1" = train ]; then build_train; fi
    flock -u 9
    push "$port"
    push "$((port + 1))" "$user:$password"
    exports
    if [ "$1" = train ]; then
      push "$port" "" train "$IMAGE_VERSION.$TRAIN_VERSION"
      echo "export PADDLECLOUD_TRAIN_IMAGE=$host:$port/paddlecloud-test/train:$IMAGE_VERSION.$TRAIN_VERSION"
    fi
    ;;
  build)
    mkdir -p "$cache"
    exec 9>>"$cache/.lock"
    flock 9
    build_image
    build_train
    ;;
  status)
    ok=0
    answers "$port" && echo "open registry: $host:$port" || { echo "open registry: down"; ok=1; }
    answers "$((port + 1))" "$user:$password" && echo "private registry: $host:$((port + 1))" \
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
    echo "usage: $0 start|train|build|status|stop" >&2
    exit 2
    ;;
esac
