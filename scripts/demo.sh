#!/usr/bin/env bash
# `make demo`: start the embedded platform, put the fit_a_line data set into PFS (8 shard files),
# submit examples/fit_a_line (2 pservers + 2 trainers, PaddlePaddle parameter-server mode) whose
# trainers lease the shards from the job's task master for 5 passes, follow it to the end, show the
# task master's record and where the model is, stop.
# Exits 0 only if the job Succeeded and reported its final loss.
#
#   scripts/demo.sh                  # the local backend (make demo)
#   scripts/demo.sh --backend slurm  # on the private Slurm cluster of scripts/ensure-slurm.sh (make demo-slurm)
set -euo pipefail
cd "$(dirname "$0")/.."
BACKEND=local
if [ "${1:-}" = "--backend" ]; then BACKEND=${2:?"--backend local|slurm"}; fi
PC=.venv/bin/paddlecloud
DEMO=$PWD/.demo
# a fresh platform each run, but the job environments it built (PaddlePaddle: ~10-60 s) are kept
if [ -d "$DEMO/data/cluster/envs" ]; then mv "$DEMO/data/cluster/envs" "$DEMO/envs.kept"; fi
find "$DEMO" -mindepth 1 -maxdepth 1 ! -name envs.kept -exec rm -rf {} + 2>/dev/null || true
mkdir -p "$DEMO/data/cluster"
if [ -d "$DEMO/envs.kept" ]; then mv "$DEMO/envs.kept" "$DEMO/data/cluster/envs"; fi
export PADDLECLOUD_CONFIG=$DEMO/client-config   # leave ~/.paddle/config alone
PORT=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start=$SECONDS

# jobs run in a bubblewrap sandbox (docs/security.md); install it where we can (root + apt-get);
# auto: the sandbox where bubblewrap works, else none (the server's log then says why)
UP_ARGS=()
if [ "$BACKEND" = slurm ]; then  # its workers get the same sandbox, made on their node (docs/slurm.md)
  echo "== starting the private Slurm cluster (scripts/ensure-slurm.sh: slurmctld + nodes n1..n3)"
  eval "$(bash scripts/ensure-slurm.sh start)"
  UP_ARGS=(--backend slurm)
fi
if bash scripts/ensure-system-packages.sh bubblewrap; then
  UP_ARGS+=(--isolation auto)
else
  UP_ARGS+=(--isolation none)
  echo "== bubblewrap is not available: the demo runs its job without isolation (--isolation none)"
fi

echo "== starting PaddleCloud on 127.0.0.1:$PORT (data: $DEMO/data, log: $DEMO/server.log)"
$PC up --port "$PORT" --data-dir "$DEMO/data" "${UP_ARGS[@]}" >"$DEMO/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 100); do
  if $PC version >/dev/null 2>&1; then break; fi
  if ! kill -0 $SERVER 2>/dev/null; then cat "$DEMO/server.log"; echo "the server did not start"; exit 1; fi
  sleep 0.2
done
$PC version
grep -m1 "isolation:" "$DEMO/server.log" || true
TOKEN=$(.venv/bin/python -c 'import sys, yaml; c = yaml.safe_load(open(sys.argv[1])); print(c["datacenters"][c["current"]]["token"])' "$PADDLECLOUD_CONFIG")
echo "== web console: http://127.0.0.1:$PORT/ui/ (log in with the token $TOKEN); watch the job there while the demo runs"

echo "== the data set: 20,000 rows in 8 shard files, copied to pfs:data/fit-a-line"
.venv/bin/python examples/fit_a_line/data.py "$DEMO/dataset"
$PC pfs cp -r -q "$DEMO/dataset" pfs:data/fit-a-line

echo "== submitting examples/fit_a_line: 2 pservers + 2 trainers leasing the shards (the first run builds its environment)"
$PC submit examples/fit_a_line --name fit-a-line --framework paddle-ps \
  --entry "python train.py" --pservers 2 --trainers 2 --cpu 250m --pscpu 250m \
  --input pfs:data/fit-a-line --tasks-from-input --passes 5 --task-timeout 10 --restart-policy OnFailure --wait || {
    echo "== the job did not succeed:"; $PC describe fit-a-line; exit 1; }

echo "== result"
$PC get jobs -a
$PC get workers fit-a-line
$PC get tasks fit-a-line
loss=$($PC logs fit-a-line -w trainer-0 | grep -E "^final loss" | awk '{print $3}')
test -n "$loss" || { echo "no final loss in trainer-0's log"; exit 1; }
output=$($PC describe fit-a-line -o json | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)["spec"]["output"])')
echo "== fetching the model from the cluster file system: $output/model"
$PC pfs ls "$output/model"
$PC pfs cp -r "$output/model" "$DEMO/model"
test -f "$DEMO/model/inference.pdmodel" || { echo "no model at $DEMO/model"; exit 1; }
echo "final loss: $loss (the data's noise floor is 0.01)"
echo "model:      $DEMO/model (from $output/model)"
ls -l "$DEMO/model"
echo "== demo finished in $((SECONDS - start)) s; stopping the platform"
