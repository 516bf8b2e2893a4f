#!/usr/bin/env bash
# The suite as `make test` runs it: three lanes at once, each one pytest process, each serial inside.
#
#   lane "system":  tests/e2e                 real servers, jobs, PostgreSQL, Chromium; timing-sensitive
#   lane "rest":    tests/unit tests/fuzz     in-process tests, then
#                   tests/kube                the operator against the strict fake API server, then
#                   tests/torch_rendezvous    torch's own rendezvous pieces, in .venv-torch (made here
#                                             from the local CPU wheel: the dev venv has no torch)
#   lane "cluster": tests/conformance tests/slurm   the private Slurm cluster (one lane owns it), then
#                   tests/hosts               the multi-host test bed (scripts/ensure-hosts.sh: hosts in
#                                             namespaces, Slurm on them; root only, else skipped)
#
# (tests/kube moved from the system lane on 2026-11-26: the system lane was the long pole by ~260 s.
# The cluster lane split from "rest" on 2026-12-04: rest had become the long pole, 2,012 s of a
# 2,161 s run, and most of the cluster lane waits on slurmd and the hosts' processes.)
#
# Most of the system and cluster lanes wait on processes, so the rest lane's CPU work fits beside
# them on two cores. Each lane writes its own log (.test-logs/LANE.log, printed here when all are
# done), its JUnit XML (.test-logs/LANE.xml: `python3 scripts/test-times.py` sums it per file) and
# its own pytest temp dir. Lanes that share a kind of server get their own: each registry bed has its
# own port (tests/registry_bed.Place). The exit status is non-zero when any lane failed.
set -uo pipefail
cd "$(dirname "$0")/.."
PYTEST=${PYTEST:-.venv/bin/pytest}
LOGS=.test-logs
mkdir -p "$LOGS"
base=$(mktemp -d -t pc-tests-XXXXXX)

lane() {  # lane NAME PYTEST-ARGS...: run pytest ($PYTEST), log to $LOGS/NAME.log, record the status
    local name=$1
    shift
    "$PYTEST" -q --durations=15 --junitxml="$LOGS/$name.xml" --basetemp="$base/$name" "$@" >"$LOGS/$name.log" 2>&1
    echo $? >"$LOGS/$name.rc"
}

torch_venv() {  # tests/torch_rendezvous needs torch: a venv with it (the local CPU wheel)
    local venv=.venv-torch
    if ! "$venv/bin/python" -c "import torch, pytest, pytest_timeout" 2>/dev/null; then
        "${PYTHON:-python3}" -m venv "$venv" &&
            "$venv/bin/pip" install -q --disable-pip-version-check "torch==2.13.0" numpy "pytest>=8" "pytest-timeout>=2.3"
    fi
}

rest_lane() {  # the in-process tests, then the torch tests in their own venv (their log appended)
    lane rest tests/unit tests/fuzz tests/kube
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

progress() {  # the last "[ NN%]" of a lane's log
    tail -c 300 "$LOGS/$1.log" 2>/dev/null | tr -d '\n' | grep -o '\[ *[0-9]*%\]' | tail -1
}

started=$SECONDS
echo "== tests in three lanes (logs in $LOGS/): system = e2e; rest = unit + fuzz + kube + torch_rendezvous;" \
    "cluster = conformance + slurm + hosts"
lane system tests/e2e &
pids=$!
rest_lane &
pids="$pids $!"
lane cluster tests/conformance tests/slurm tests/hosts &
pids="$pids $!"
running() {
    local pid
    for pid in $pids; do kill -0 "$pid" 2>/dev/null && return 0; done
    return 1
}
while running; do  # a heartbeat for CI logs, with the machine's load
    sleep 60
    echo "   ... $(( (SECONDS - started) / 60 )) min: system $(progress system), rest $(progress rest)," \
        "cluster $(progress cluster); load $(cut -d' ' -f1-3 /proc/loadavg)"
done
# shellcheck disable=SC2086
wait $pids

rc=0
for name in system rest cluster; do
    echo
    echo "==================== lane $name ===================="
    cat "$LOGS/$name.log"
    [ "$(cat "$LOGS/$name.rc")" = 0 ] || rc=1
done
echo
echo "== lanes: system rc=$(cat "$LOGS/system.rc"), rest rc=$(cat "$LOGS/rest.rc")," \
    "cluster rc=$(cat "$LOGS/cluster.rc"); $((SECONDS - started)) s"
python3 scripts/test-times.py "$LOGS"/*.xml 2>/dev/null || true
rm -rf "$base"
exit $rc
