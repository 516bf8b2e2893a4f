#!/usr/bin/env bash
# The suite as `make test` runs it: two lanes at once, each one pytest process, each serial inside.
#
#   lane "system": tests/e2e                 real servers, jobs, PostgreSQL, Chromium; timing-sensitive
#   lane "rest":   tests/unit tests/fuzz     in-process tests, then
#                  tests/kube                the operator against the strict fake API server, then
#                  tests/conformance tests/slurm   the private Slurm cluster (one lane owns it), then
#                  tests/hosts               the multi-host test bed (scripts/ensure-hosts.sh: hosts in
#                                            namespaces, Slurm on them; root only, else skipped), then
#                  tests/torch_rendezvous    torch's own rendezvous pieces, in .venv-torch (made here
#                                            from the local CPU wheel: the dev venv has no torch)
#
# (tests/kube moved from the system lane on 2026-11-26: the system lane was the long pole by ~260 s
# and the kube tests take ~110 s)
#
# Most of the system lane waits on processes, so the other lane's CPU work fits beside it on two
# cores. Each lane writes its own log (.test-logs/LANE.log, printed here when both are done) and its
# own pytest temp dir. The exit status is non-zero when either lane failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTEST=${PYTEST:-.venv/bin/pytest}
LOGS=.test-logs
mkdir -p "$LOGS"
base=$(mktemp -d -t pc-tests-XXXXXX)

lane() {  # lane NAME PYTEST-ARGS...: run pytest ($PYTEST), log to $LOGS/NAME.log, record the status
    local name=$1
    shift
    "$PYTEST" -q --durations=15 --basetemp="$base/$name" "$@" >"$LOGS/$name.log" 2>&1
    echo $? >"$LOGS/$name.rc"
}

torch_venv() {  # tests/torch_rendezvous needs torch: a venv with it (the local CPU wheel)
    local venv=.venv-torch
    if ! "$venv/bin/python" -c "import torch, pytest, pytest_timeout" 2>/dev/null; then
        "${PYTHON:-python3}" -m venv "$venv" &&
            "$venv/bin/pip" install -q --disable-pip-version-check "torch==2.13.0" numpy "pytest>=8" "pytest-timeout>=2.3"
    fi
}

rest_lane() {  # the rest, then the torch tests in their own venv (their log appended)
    lane rest tests/unit tests/fuzz tests/kube tests/conformance tests/slurm tests/hosts
    local rc
    rc=$(cat "$LOGS/rest.rc")
    if torch_venv >>"$LOGS/rest.log" 2>&1; then
        PYTHONPATH=src PYTEST=.venv-torch/bin/pytest lane torch tests/torch_rendezvous
        cat "$LOGS/torch.log" >>"$LOGS/rest.log"
        [ "$(cat "$LOGS/torch.rc")" = 0 ] || rc=1
    else
        echo "the torch venv could not be made (.venv-torch)" >>"$LOGS/rest.log"
        rc=1
    fi
    echo "$rc" >"$LOGS/rest.rc"
}

started=$SECONDS
echo "== tests in two lanes (logs in $LOGS/): system = e2e; rest = unit + fuzz + kube + conformance + slurm + hosts + torch_rendezvous"
lane system tests/e2e &
system=$!
rest_lane &
rest=$!
while kill -0 "$system" 2>/dev/null || kill -0 "$rest" 2>/dev/null; do  # a heartbeat for CI logs
    sleep 60
    echo "   ... $(( (SECONDS - started) / 60 )) min: system $(tail -c 300 "$LOGS/system.log" | tr -d '\n' | grep -o '\[ *[0-9]*%\]' | tail -1), rest $(tail -c 300 "$LOGS/rest.log" | tr -d '\n' | grep -o '\[ *[0-9]*%\]' | tail -1)"
done
wait "$system" "$rest"

rc=0
for name in system rest; do
    echo
    echo "==================== lane $name ===================="
    cat "$LOGS/$name.log"
    [ "$(cat "$LOGS/$name.rc")" = 0 ] || rc=1
done
echo
echo "== lanes: system rc=$(cat "$LOGS/system.rc"), rest rc=$(cat "$LOGS/rest.rc"); $((SECONDS - started)) s"
rm -rf "$base"
exit $rc
