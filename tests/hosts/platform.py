"""PaddleCloud on the bed: the server on ``head``, the CLI on ``laptop``, as a user would have them.

    head    paddlecloud up --backend slurm --host <head's address> --port PORT --data-dir SHARED/...
            (every worker a Slurm batch job on c1..c3; the data dir on the cluster file system; pip
            offline: the bed's PIP_* point at its wheel folder; the server's client config, with the
            default user's token, in the run's folder on the shared directory)
    laptop  paddlecloud login --endpoint http://<head>:PORT --token T, then every CLI command, over
            HTTP only: the laptop has no shared directory, no munge, no Slurm (ensure-hosts.sh)

The test process itself is on neither: it drives both with ``ensure-hosts.sh exec`` and reads the
shared directory (the same path here) for the server's log and the workers' log files.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from tests.hosts.conftest import Bed
from tests.kube.conftest import wait_for

PADDLECLOUD = str(Path(sys.executable).parent / "paddlecloud")
#: the server's port on head (its own network namespace: nothing else there listens on it)
PORT = 18080
#: seconds between two looks at a job from the laptop
POLL_S = 3.0


class BedPlatform:
    """``up`` on head and a logged-in CLI on the laptop; :meth:`close` kills the jobs and stops it."""

    def __init__(self, bed: Bed, *up_args: str, host: str = "", port: int = PORT) -> None:
        """``host``: what ``up --host`` binds (default: head's address)."""
        self.bed = bed
        self.base = bed.shared / f"platform-{uuid.uuid4().hex[:8]}"
        self.base.mkdir(parents=True)
        self.head = bed.addresses["head"]
        self.url = f"http://{self.head}:{port}"
        self.log = self.base / "server.log"
        server_env = {"PADDLECLOUD_CONFIG": str(self.base / "head-config")}
        args = [PADDLECLOUD, "up", "--backend", "slurm", "--host", host or self.head, "--port", str(port),
                "--data-dir", str(self.base / "data"), *up_args]  # fmt: skip
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                bed.argv("head", *args), stdout=out, stderr=subprocess.STDOUT,
                env=bed.environ(server_env),
            )  # fmt: skip
        self.laptop_env = {"PADDLECLOUD_CONFIG": f"/tmp/{self.base.name}/config"}
        try:
            wait_for("the server on head, from the laptop", self._healthy, timeout=90)
            config = yaml.safe_load((self.base / "head-config").read_text())
            token = config["datacenters"][config["current"]]["token"]
            self.cli("login", "--endpoint", self.url, "--token", token)
        except BaseException:
            self.close(keep=True)
            raise

    def _healthy(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()[-3000:]
        probe = self.bed.run("laptop", "curl", "-sf", "-m", "2", f"{self.url}/api/v1/health", check=False)
        return probe.returncode == 0

    def cli(self, *args: str, timeout: float = 120, config: str = "") -> str:
        """``paddlecloud ARGS`` on the laptop (``config``: another user's client config there)."""
        env = {"PADDLECLOUD_CONFIG": config} if config else self.laptop_env
        proc = self.bed.run("laptop", PADDLECLOUD, *args, timeout=timeout, check=False, env=env)
        what = f"laptop: paddlecloud {' '.join(args)}: {proc.stdout}{proc.stderr}"
        assert proc.returncode == 0, f"{what}\nserver log:\n{self.log.read_text()[-3000:]}"
        return proc.stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.cli(*args, "-o", "json"))

    def laptop_package(self, name: str, program: str) -> str:
        """A package folder on the laptop holding ``main.py`` = ``program``; its path there."""
        package = f"/tmp/{self.base.name}/{name}"
        write = (
            f"import pathlib; d = pathlib.Path({package!r}); d.mkdir(parents=True); "
            f"(d / 'main.py').write_text({program!r})"
        )
        self.bed.run("laptop", sys.executable, "-c", write)
        return package

    def close(self, keep: bool = False) -> None:
        """Kill the jobs, stop the server; its folder goes too (the shared directory is a tmpfs
        that the bed's ``stop`` ends anyway). With ``keep`` (a test failed) its logs, database and
        records, not its environments, are copied to the bed's folder first: ``DIR/kept/``."""
        try:
            if self.proc.poll() is None and (self.base / "head-config").exists():
                for job in self.json("get", "jobs")["items"]:
                    self.cli("kill", job["name"], "--grace", "1")
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        log = self.log.read_text()
        if keep:
            kept = Path(self.bed.env["PADDLECLOUD_HOSTS_DIR"]) / "kept" / self.base.name
            try:
                shutil.copytree(self.base, kept, ignore=shutil.ignore_patterns("envs"), symlinks=True)
            except (OSError, shutil.Error) as exc:  # what could be copied is there
                print(f"\ncopying the failed platform's files: {exc}"[:500])
            print(f"\nthe failed platform's files: {kept}")
        shutil.rmtree(self.base, ignore_errors=True)
        self.bed.run("laptop", "rm", "-rf", f"/tmp/{self.base.name}", check=False)
        assert "Traceback" not in log, log[-5000:]


def wait_phase(p: BedPlatform, job: str, phases: tuple[str, ...], timeout: float) -> dict[str, Any]:
    """``describe JOB`` once its phase is one of ``phases``, asked from the laptop every
    ``POLL_S`` (each ask is a CLI process: polled as fast as ``wait_for`` does, the CLI's start-up
    would take a core of this 2-core machine from the jobs)."""
    deadline = time.monotonic() + timeout
    while True:
        found: dict[str, Any] = p.json("describe", job)
        if found["phase"] in phases:
            return found
        assert time.monotonic() < deadline, f"{job} not {' or '.join(phases)} within {timeout} s: {found}"
        time.sleep(POLL_S)


def elapsed(t0: float) -> str:
    return f"{time.monotonic() - t0:.1f} s"
