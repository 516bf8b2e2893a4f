"""A compute host cut off from the network during a job, then back (issue 25): its cable pulled
(``ensure-hosts.sh link HOST down``: its processes keep running, nothing reaches it), the server on
head, the workers Slurm jobs on c1..c3.

The worker on the cut-off host ends itself within ``fence_after_s`` (half of the bed's
``SlurmdTimeout`` of 10 s: ``node.fence``), before Slurm counts the node down (NODE_FAIL) and the
platform restarts it on another host; so it never runs twice: of the cut-off run no output exists
(before: it trained on and wrote its output, after the link came back, beside its restart). Once
the cable is back, no process of the job is left on that host and Slurm takes it back into service.
The job succeeds with one restart, and the restart's event says why (``CutOff``).
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from tests.hosts.conftest import COMPUTE, SCRIPT, Bed, bed_processes
from tests.hosts.platform import PORT, BedPlatform, wait_phase

pytestmark = [pytest.mark.hosts, pytest.mark.timeout(600)]

#: a worker of STEPS seconds that writes <worker>.run<run> into the job's output at its end
PROGRAM = """\
import os, pathlib, time
w, r = os.environ["PADDLECLOUD_WORKER"], os.environ["PADDLECLOUD_RESTART"]
print("start", w, "run", r, flush=True)
for _ in range(int(os.environ["STEPS"])):
    time.sleep(1)
pathlib.Path(os.environ["PADDLECLOUD_OUTPUT_DIR"], f"{w}.run{r}").write_text(os.uname().nodename)
print("done", w, flush=True)
"""
#: how long the cable stays out: past Slurm's NODE_FAIL (~10-20 s) and the restart elsewhere
CUT_S = 30


def _link(bed: Bed, host: str, state: str) -> None:
    proc = subprocess.run(["bash", str(SCRIPT), "link", host, state], capture_output=True, text=True,
                          timeout=30, check=False, env=bed.environ())  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def _node_state(bed: Bed, node: str) -> str:
    return bed.out("head", "sinfo", "-h", "-n", node, "-o", "%T").strip()


def test_a_worker_cut_off_ends_itself_and_runs_once_elsewhere(bed: Bed) -> None:
    p = BedPlatform(bed, port=PORT + 3)
    try:
        package = p.laptop_package("cut", PROGRAM)
        p.cli("submit", package, "--name", "cut", "--entry", "python main.py", "--trainers", "2",
              "--cpu", "5", "--restart-policy", "OnFailure", "--env", "STEPS=45")  # fmt: skip

        def workers() -> dict[str, dict[str, str]]:
            return {w["name"]: w for w in p.json("get", "workers", "cut")["items"]}

        deadline = time.monotonic() + 240
        while {w["state"] for w in workers().values()} != {"Running"}:
            assert time.monotonic() < deadline, workers()
            time.sleep(2)
        time.sleep(3)  # the runs have started their programs
        victim = workers()["trainer-1"]["node"]
        cut = time.monotonic()
        _link(bed, victim, "down")
        try:
            restarted = 0.0
            while time.monotonic() - cut < CUT_S or not restarted:
                assert time.monotonic() - cut < 120, f"trainer-1 not restarted: {workers()}"
                if not restarted and workers()["trainer-1"]["node"] != victim:
                    restarted = time.monotonic() - cut
                time.sleep(2)
        finally:
            _link(bed, victim, "up")
        job = wait_phase(p, "cut", ("Succeeded", "Failed"), timeout=240)
        assert job["phase"] == "Succeeded", (job["message"], p.cli("logs", "cut")[-3000:])
        t1 = workers()["trainer-1"]
        assert t1["node"] != victim and t1["node"] in COMPUTE and t1["restarts"] == 1, t1
        said = [e["message"] for e in job["events"] if e["reason"] == "WorkerRestarting"]
        assert len(said) == 1 and re.search(r"trainer-1 \(CutOff: this node heard neither", said[0]), said
        out = sorted(f.name for f in Path(job["output_dir"]).iterdir())
        assert out == ["trainer-0.run0", "trainer-1.run1"], out  # the cut-off run never finished
        back = time.monotonic()
        while _node_state(bed, victim) not in ("idle", "mixed", "allocated"):
            assert time.monotonic() - back < 90, _node_state(bed, victim)
            time.sleep(2)
        left = [line for line in bed_processes() if line.startswith(f"{victim} ") and p.base.name in line]
        assert not left, left
        print(
            f"\ncut off {victim}: trainer-1 running again on {t1['node']} {restarted:.0f} s after the cut; "
            f"{victim} {_node_state(bed, victim)} {time.monotonic() - back:.0f} s after the job's end"
        )
    finally:
        p.close()
