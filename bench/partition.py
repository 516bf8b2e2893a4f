"""Benchmark: a compute host cut off from the network (or from the server's host only) during
training, then back, N times per case, on a bed of hosts with Slurm (``scripts/ensure-hosts.sh``:
the server on ``head``, workers on c1..c3, each host its own network namespace; ``link HOST down``
pulls a host's cable, its processes keep running; ``cut HOST head down`` parts a host from the
server's host only, every other path kept).

Cases (``--cases``):

* ``fit``: examples/fit_a_line, 2 pservers + 2 trainers (``--cpu 5``: one trainer per host), its 8
  shards leased from the task master; the host of a trainer that runs no pserver is cut off.
* ``torch``: the elastic torch example, 3 trainers of ``--cpu 3`` (min 1, max 3) around the
  platform's rendezvous store; the host of a trainer that is not the store's is cut off.
* ``plain``: 2 workers that sleep 45 s and write ``<worker>.run<run>`` into the job's output.

Each run: submit, wait until the victim's worker trains (its log past its first line), cut the
victim's host off for ``--cut-s`` seconds (30), put it back, where ``--cut`` says how: ``link`` (its
cable pulled: it reaches no one) or ``head`` (only it and the server's host, where slurmctld runs too,
no longer reach each other: "the server's host cut off from a node for 60 s"; its peers still reach it),
wait for the job's end. A run passes when the job Succeeded, the victim's worker ran again on another
host exactly once, its restart's reason is ``CutOff`` (the cut-off run ended itself: ``node.fence``),
nothing of the job is left on the victim, and per case: fit's task master has every shard done every
pass exactly (``get tasks``); torch's final accuracy >= 0.97; plain's output holds no file of the
cut-off run. Prints per run the seconds from the cut to the victim's worker running elsewhere
(recovery) and to the job's end, then the passes and the median recovery per case.

The bed is its own (``--bed-dir``, ``--bed-net``, Slurm port 16817: not the tests' bed) and is
stopped at the end unless it was running before.

``--isolation none`` runs the workers unsandboxed (their monitor then only fences).

    .venv/bin/python bench/partition.py [--cases fit torch plain] [--runs 5] [--cut-s 30] [--cut head]
        [--isolation none]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "ensure-hosts.sh"
PADDLECLOUD = str(ROOT / ".venv" / "bin" / "paddlecloud")
EXAMPLES = ROOT / "examples"
PORT = 18095
PASSES = 10  # a second or two each: long enough that the cut lands while it trains
PLAIN = """\
import os, pathlib, time
w, r = os.environ["PADDLECLOUD_WORKER"], os.environ["PADDLECLOUD_RESTART"]
print("start", w, "run", r, flush=True)
for _ in range(45):
    time.sleep(1)
pathlib.Path(os.environ["PADDLECLOUD_OUTPUT_DIR"], f"{w}.run{r}").write_text(os.uname().nodename)
"""


class Bed:
    def __init__(self, bed_dir: str, net: str) -> None:
        mine = {k: v for k, v in os.environ.items() if not k.startswith("PADDLECLOUD_") and k != "SLURM_CONF"}
        self.env = {**mine, "PADDLECLOUD_HOSTS_DIR": bed_dir, "PADDLECLOUD_HOSTS_NET": net,
                    "PADDLECLOUD_SLURM_PORT": "16817",
                    "PADDLECLOUD_HOSTS_PYTHON": sys.executable}  # fmt: skip
        packages = ["bash", str(ROOT / "scripts" / "ensure-system-packages.sh"), "bubblewrap"]
        if subprocess.run(packages, check=False).returncode:
            raise SystemExit("bubblewrap is needed (the runs' sandbox and their monitor)")
        self.was_running = self.sh("status").returncode == 0
        reqs = [str(EXAMPLES / n / "requirements.txt") for n in ("fit_a_line", "torch_ddp")]
        for step in (("wheels", *reqs), ("start",)):
            done = self.sh(*step, timeout=900)
            if done.returncode != 0:
                raise SystemExit(f"ensure-hosts.sh {step[0]}: {done.stderr[-2000:]}")
            if step[0] == "start":
                exports = dict(re.findall(r"^export (\w+)=(.*)$", done.stdout, re.M))
                self.env.update({k: v.strip("'\"") for k, v in exports.items()})
        hosts = self.sh("hosts").stdout.split()
        self.addr = dict(zip(hosts[::2], hosts[1::2], strict=True))
        self.shared = Path(self.env["PADDLECLOUD_HOSTS_SHARED"])

    def sh(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                              env=self.env, check=False)  # fmt: skip

    def on(self, host: str, *cmd: str, timeout: float = 120, env: dict[str, str] | None = None) -> str:
        proc = subprocess.run(["bash", str(SCRIPT), "exec", host, *cmd], capture_output=True, text=True,
                              timeout=timeout, env={**self.env, **(env or {})}, check=False)  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"{host}: {' '.join(cmd)}: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
        return proc.stdout

    def stop(self) -> None:
        if not self.was_running:
            self.sh("stop", timeout=300)


class Platform:
    """``up --backend slurm`` on head, data on the shared directory; the CLI on head."""

    def __init__(self, bed: Bed, isolation: str) -> None:
        self.bed, self.base = bed, bed.shared / f"bench-part-{uuid.uuid4().hex[:6]}"
        self.base.mkdir(parents=True)
        self.config = {"PADDLECLOUD_CONFIG": str(self.base / "config")}
        self.log = open(self.base / "server.log", "wb")  # noqa: SIM115 - closed in close()
        head = bed.addr["head"]
        # each run's monitor fences a cut-off node (node.fence), sandboxed or not
        argv = ["bash", str(SCRIPT), "exec", "head", PADDLECLOUD, "up", "--backend", "slurm", "--host", head,
                "--port", str(PORT), "--data-dir", str(self.base / "data"),
                "--isolation", isolation]  # fmt: skip
        self.proc = subprocess.Popen(
            argv, stdout=self.log, stderr=subprocess.STDOUT, env={**bed.env, **self.config}
        )
        for _ in range(300):
            if (self.base / "config").exists() and self._healthy():
                return
            if self.proc.poll() is not None:
                raise SystemExit((self.base / "server.log").read_text()[-3000:])
            time.sleep(0.5)
        raise SystemExit("the server did not come up")

    def _healthy(self) -> bool:
        try:
            self.bed.on(
                "head", "curl", "-sf", "-m", "2", f"http://{self.bed.addr['head']}:{PORT}/api/v1/health"
            )
        except RuntimeError:
            return False
        return True

    def cli(self, *args: str) -> str:
        return self.bed.on("head", PADDLECLOUD, *args, env=self.config, timeout=300)

    def json(self, *args: str) -> Any:
        return json.loads(self.cli(*args, "-o", "json"))

    def close(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


@dataclass
class Case:
    submit: Callable[[Platform, str], None]
    #: the worker to cut off, from the workers: a trainer on a host of none of the job's servers
    victim: Callable[[dict[str, dict[str, Any]]], str]
    #: "" when the run's result is right, else what is wrong
    check: Callable[[Platform, str, dict[str, Any]], str]
    timeout_s: float
    #: what the job's logs show once it trains (the cable is pulled then)
    training: str
    #: whose log shows it: the victim's (True) or any worker's (False: torch's rank 0 prints steps)
    victims_log: bool = True


def _servers_elsewhere(workers: dict[str, dict[str, Any]]) -> str:
    servers = {w["node"] for w in workers.values() if w["role"] != "trainer"}
    return next(n for n, w in sorted(workers.items()) if w["role"] == "trainer" and w["node"] not in servers)


def _submit_fit(p: Platform, name: str) -> None:
    data = p.base / "fit-data"
    if not data.exists():
        subprocess.run([sys.executable, str(EXAMPLES / "fit_a_line" / "data.py"), str(data)], check=True,
                       capture_output=True)  # fmt: skip
        p.cli("pfs", "cp", "-r", "-q", str(data), "pfs:data/fit-a-line")
    p.cli("submit", str(EXAMPLES / "fit_a_line"), "--name", name, "--framework", "paddle-ps", "--entry",
          "python train.py", "--pservers", "2", "--trainers", "2", "--cpu", "5", "--pscpu", "1",
          "--input", "pfs:data/fit-a-line", "--tasks-from-input", "--passes", str(PASSES),
          "--restart-policy", "OnFailure")  # fmt: skip


def _check_fit(p: Platform, name: str, job: dict[str, Any]) -> str:
    tasks = [(t["state"], t["done_passes"]) for t in p.json("get", "tasks", name)["items"]]
    return "" if tasks == [("done", PASSES)] * 8 else f"tasks {tasks}"


def _submit_torch(p: Platform, name: str) -> None:
    p.cli("submit", str(EXAMPLES / "torch_ddp"), "--name", name, "--framework", "torch", "--entry",
          "torchrun train.py", "--trainers", "3", "--min-instance", "1", "--max-instance", "3", "--cpu", "3",
          "--env", "EPOCHS=60", "--env", "PROGRESS_EVERY=10")  # fmt: skip


def _check_torch(p: Platform, name: str, job: dict[str, Any]) -> str:
    acc = re.findall(r"final accuracy ([0-9.]+)$", p.cli("logs", name), re.M)
    return "" if acc and float(acc[-1]) >= 0.97 else f"final accuracy {acc[-1:]}"


def _submit_plain(p: Platform, name: str) -> None:
    pkg = p.base / "plain"
    pkg.mkdir(exist_ok=True)
    (pkg / "main.py").write_text(PLAIN)
    p.cli("submit", str(pkg), "--name", name, "--entry", "python main.py", "--trainers", "2", "--cpu", "5",
          "--restart-policy", "OnFailure")  # fmt: skip


def _check_plain(p: Platform, name: str, job: dict[str, Any]) -> str:
    out = sorted(f.name for f in Path(job["output_dir"]).iterdir())
    return "" if out == ["trainer-0.run0", "trainer-1.run1"] else f"output {out}"


CASES = {
    # fit_a_line's passes take a second or two each: cut at its first line, as it starts training
    "fit": Case(_submit_fit, _servers_elsewhere, _check_fit, 600, r"\S"),
    "torch": Case(_submit_torch, _servers_elsewhere, _check_torch, 900, r"step \d+ epoch", False),
    "plain": Case(_submit_plain, lambda w: "trainer-1", _check_plain, 300, r"^start"),
}


def _shows(p: Platform, job: str, worker: str, pattern: str) -> bool:
    """Whether ``worker``'s log ("" : any worker's) has a line ``pattern`` matches."""
    try:
        return re.search(pattern, p.cli("logs", job, *(["-w", worker] if worker else [])), re.M) is not None
    except RuntimeError:
        return False


@dataclass(frozen=True)
class Cut:
    """How and for how long the victim's host is cut off."""

    how: str  # "link": its cable; "head": only between it and the server's host
    seconds: float

    def set(self, bed: Bed, host: str, state: str) -> None:
        done = bed.sh("link", host, state) if self.how == "link" else bed.sh("cut", host, "head", state)
        if done.returncode != 0:
            raise RuntimeError(f"cut {host} {state}: {done.stderr}")


def one_run(bed: Bed, p: Platform, case: str, i: int, cut: Cut) -> dict[str, Any]:
    c, name = CASES[case], f"{case}-{i}"
    t0 = time.monotonic()
    c.submit(p, name)

    def workers() -> dict[str, dict[str, Any]]:
        return {w["name"]: w for w in p.json("get", "workers", name)["items"]}

    victim = ""
    while not victim:  # every worker running and the victim past its first lines
        if time.monotonic() - t0 > c.timeout_s:
            return {"ok": False, "why": f"not training: {workers()}"}
        seen = workers()
        if seen and all(w["state"] == "Running" for w in seen.values()):
            who = c.victim(seen)
            if _shows(p, name, who if c.victims_log else "", c.training):
                victim = who
                break
        time.sleep(1)
    host = workers()[victim]["node"]
    cut.set(bed, host, "down")
    at = time.monotonic()
    recovered = ended = None

    def look() -> dict[str, Any]:  # the job, noting when the victim ran elsewhere and the job ended
        nonlocal recovered, ended
        job: dict[str, Any] = p.json("describe", name)
        w = {x["name"]: x for x in job["workers"]}.get(victim, {})
        if recovered is None and w.get("node") != host and w.get("state") in ("Running", "Succeeded"):
            recovered = time.monotonic() - at
        if ended is None and job["phase"] in ("Succeeded", "Failed"):
            ended = time.monotonic() - at
        return job

    try:
        while time.monotonic() - at < cut.seconds:
            look()
            time.sleep(2)
    finally:
        cut.set(bed, host, "up")
    while True:
        job = look()
        if ended is not None or time.monotonic() - t0 > c.timeout_s + cut.seconds:
            break
        time.sleep(3)
    why = []
    if job["phase"] != "Succeeded":
        why.append(f"{job['phase']}: {job['message']}")
    w = workers()[victim]
    if w["node"] == host or w["restarts"] != 1:
        why.append(f"{victim} on {w['node']} with {w['restarts']} restarts")
    events = [e["message"] for e in job["events"] if e["reason"] == "WorkerRestarting"]
    if not any(f"{victim} (CutOff" in e for e in events):
        why.append(f"restarts: {events}")
    left = [
        ln for ln in bed.sh("procs").stdout.splitlines() if ln.startswith(f"{host} ") and p.base.name in ln
    ]
    if left:
        why.append(f"left on {host}: {left[:3]}")
    if job["phase"] == "Succeeded" and (bad := c.check(p, name, job)):
        why.append(bad)
    return {"ok": not why, "why": "; ".join(why), "host": host, "victim": victim, "recovered_s": recovered,
            "ended_s": ended}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", nargs="+", choices=sorted(CASES), default=["fit", "torch"])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cut-s", type=float, default=30.0)
    ap.add_argument("--cut", choices=("link", "head"), default="link")
    ap.add_argument("--isolation", choices=("sandbox", "none"), default="sandbox")
    ap.add_argument("--bed-dir", default="/var/lib/paddlecloud-bench-part")
    ap.add_argument("--bed-net", default="10.79.0")
    args = ap.parse_args()
    # a SIGTERM unwinds like ^C: the cable is put back, the server stopped, the bed left as found
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    bed = Bed(args.bed_dir, args.bed_net)
    p = Platform(bed, args.isolation)
    results: dict[str, list[dict[str, Any]]] = {}
    try:
        for case in args.cases:
            for i in range(args.runs):
                r = one_run(bed, p, case, i, Cut(args.cut, args.cut_s))
                results.setdefault(case, []).append(r)
                rec = f"{r['recovered_s']:.0f} s" if r.get("recovered_s") is not None else "-"
                end = f"{r['ended_s']:.0f} s" if r.get("ended_s") is not None else "-"
                print(f"{case} run {i + 1}: {'ok' if r['ok'] else 'FAILED'}; cut {r.get('victim')} on "
                      f"{r.get('host')} ({args.cut}) for {args.cut_s:g} s; running elsewhere after {rec}; "
                      f"job ended {end} after the cut {r['why']}", flush=True)  # fmt: skip
    finally:
        p.close()
        shutil.rmtree(p.base, ignore_errors=True)
        bed.stop()
    for case, rs in results.items():
        times: list[float] = [r["recovered_s"] for r in rs if r.get("recovered_s") is not None]
        med = "-"
        if times:
            med = f"{statistics.median(times):.0f} s (min {min(times):.0f}, max {max(times):.0f})"
        print(f"{case}: {sum(r['ok'] for r in rs)}/{len(rs)} passed; median recovery {med}")


if __name__ == "__main__":
    main()
