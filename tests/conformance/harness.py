"""What the conformance suite needs of each backend under test: the backend, and a way to drive its
engine as a test would (run workers, make one exit, see what is left, restart the server).

    Harness.backend             the Backend under test
    Harness.launch(name, ...)   a JobLaunch this backend can run (its package, placement, ...)
    Harness.all_running(key)    drive / wait until every worker of the job reports Running
    Harness.exit(key, w, code)  make worker ``w`` end with ``code`` (as its program would)
    Harness.leftovers(key)      what of the job still runs on the engine (processes, pods, records)
    Harness.reopen()            a server restart: a new backend over the same engine (for adopt)
    Harness.write_scratch(key, w, n)   ``n`` bytes into worker ``w``'s working directory, as its
                                program would (backends declaring ``disk-usage``)

Every worker, once running, has written ``hello from <worker>`` to its log.
"""

from __future__ import annotations

import io
import os
import tarfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil

from paddlecloud.backends.base import Backend, JobLaunch, JobStatus
from paddlecloud.core.envcontract import ApiAccess
from paddlecloud.core.phases import WorkerState
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import WorkerPlacement

__all__ = ["DEADLINE_S", "Harness", "placement", "wait_for"]

DEADLINE_S = 30.0


def wait_for(what: str, check: Callable[[], Any], timeout: float = DEADLINE_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def placement(node: str, pservers: int, trainers: int) -> tuple[WorkerPlacement, ...]:
    return tuple(
        [WorkerPlacement("pserver", i, node) for i in range(pservers)]
        + [WorkerPlacement("trainer", i, node) for i in range(trainers)]
    )


class Harness(Protocol):
    backend: Backend

    def launch(self, name: str, pservers: int = 0, trainers: int = 1) -> JobLaunch: ...
    def all_running(self, key: str) -> JobStatus: ...
    def exit(self, key: str, worker: str, code: int) -> None: ...
    def leftovers(self, key: str) -> list[str]: ...
    def reopen(self) -> Backend: ...
    def write_scratch(self, key: str, worker: str, n: int) -> None: ...


def _launch(name: str, node: str, pservers: int, trainers: int, **kw: Any) -> JobLaunch:
    defaults: dict[str, Any] = dict(
        key=f"alice/{name}", user="alice", name=name, framework="none", entry="python train.py",
        package=Path("/unused"), output_dir=Path("/unused"), placement=placement(node, pservers, trainers),
        api=ApiAccess("http://127.0.0.1:9", "pcj_conformance"),
        resources={"pserver": Resources(100, 2**26), "trainer": Resources(100, 2**26)},
        package_path=f"/pfs/local/home/alice/jobs/{name}/package.tar.gz",
    )  # fmt: skip
    defaults.update(kw)
    return JobLaunch(**defaults)


def _all_running(backend: Backend, key: str, expect: int) -> JobStatus:
    def check() -> JobStatus | None:
        s = backend.sync(key)
        assert s.failure is None, s.failure
        ok = len(s.workers) == expect and all(w.state == WorkerState.RUNNING for w in s.workers)
        return s if ok else None

    status: JobStatus = wait_for(f"every worker of {key} running", check)
    return status


# -- memory --------------------------------------------------------------------------------------


@dataclass
class MemoryHarness:
    backend: Any
    sizes: dict[str, int] = field(default_factory=dict)

    def launch(self, name: str, pservers: int = 0, trainers: int = 1) -> JobLaunch:
        self.sizes[f"alice/{name}"] = pservers + trainers
        return _launch(name, self.backend.settings.nodes[0].name, pservers, trainers)

    def all_running(self, key: str) -> JobStatus:
        status = _all_running(self.backend, key, self.sizes[key])
        for w in status.workers:  # what a worker program would print first
            job = self.backend.engine.jobs[key]
            if not job.workers[w.name].logs[-1]:
                self.backend.engine.log(key, w.name, f"hello from {w.name}")
        return status

    def exit(self, key: str, worker: str, code: int) -> None:
        self.backend.engine.exit(key, worker, code)

    def write_scratch(self, key: str, worker: str, n: int) -> None:
        self.backend.engine.write(key, "scratch", n)

    def leftovers(self, key: str) -> list[str]:
        return list(self.backend.engine.running(key))

    def reopen(self) -> Backend:
        from paddlecloud.backends.memory import MemoryBackend

        self.backend = MemoryBackend(self.backend.settings)
        return self.backend


# -- local (real processes) ----------------------------------------------------------------------

#: a worker program: says hello, pservers listen on their port, exits when its control file says
WORKER = """\
import os, pathlib, socket, sys, time
me = os.environ["PADDLECLOUD_WORKER"]
print(f"hello from {me}", flush=True)
if os.environ["PADDLECLOUD_ROLE"] == "pserver":
    server = socket.create_server(("127.0.0.1", int(os.environ["PADDLECLOUD_PORT"])))
control = pathlib.Path(os.environ["CONTROL_DIR"]) / f"{me}.exit"
while not control.exists():
    time.sleep(0.05)
sys.exit(int(control.read_text()))
"""


@dataclass
class LocalHarness:
    root: Path
    backend: Any = None
    pids: dict[str, set[int]] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.backend = self._open()

    def _open(self) -> Backend:
        from paddlecloud.backends.local import LocalBackend, LocalConfig, NodeShape

        nodes = NodeShape(count=1, cpu_m=4000, memory=8 * 2**30)
        return LocalBackend(
            LocalConfig(root=self.root / "cluster", nodes=nodes, isolation="none"), time.time, lambda: None
        )

    def launch(self, name: str, pservers: int = 0, trainers: int = 1) -> JobLaunch:
        package = self.root / f"{name}.tar.gz"
        with tarfile.open(package, "w:gz") as tar:
            data = WORKER.encode()
            info = tarfile.TarInfo("train.py")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        control = self._control(name)  # in the job's output: a sandboxed worker sees it (Slurm)
        control.mkdir(parents=True, exist_ok=True)
        self.sizes[f"alice/{name}"] = pservers + trainers
        return _launch(
            name, "node-0", pservers, trainers, package=package, output_dir=self.root / "out" / name,
            env={"CONTROL_DIR": str(control)},
        )  # fmt: skip

    def all_running(self, key: str) -> JobStatus:
        status = _all_running(self.backend, key, self.sizes[key])
        self.pids.setdefault(key, set()).update(w.pid for w in status.workers if w.pid)
        for w in status.workers:
            self._wait_log(key, w.name)
        return status

    def _wait_log(self, key: str, worker: str) -> None:
        from paddlecloud.backends.base import LogRequest

        hello = f"hello from {worker}".encode()
        wait_for(
            f"{worker}'s hello", lambda: hello in b"".join(self.backend.read_log(LogRequest(key, (worker,))))
        )

    def exit(self, key: str, worker: str, code: int) -> None:
        (self._control(key.partition("/")[2]) / f"{worker}.exit").write_text(str(code))

    def write_scratch(self, key: str, worker: str, n: int) -> None:
        (self._jobs_root() / key / "workers" / worker / "scratch.bin").write_bytes(os.urandom(n))

    def _jobs_root(self) -> Path:
        return Path(self.backend.config.root) / "jobs"

    def _control(self, name: str) -> Path:
        return self.root / "out" / name / "control"

    def leftovers(self, key: str) -> list[str]:
        alive = []
        for pid in self.pids.get(key, set()):
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(f"pid {pid}")
            except psutil.NoSuchProcess:
                pass
        return alive

    def reopen(self) -> Backend:
        self.backend.close()
        self.backend = self._open()
        return self.backend


# -- Kubernetes against the fake API server (tests/kube) ---------------------------------------


@dataclass
class KubeHarness:
    kube: Any
    backend: Any
    sizes: dict[str, int] = field(default_factory=dict)
    NS = "paddlecloud-alice"

    def launch(self, name: str, pservers: int = 0, trainers: int = 1) -> JobLaunch:
        self.sizes[f"alice/{name}"] = pservers + trainers
        return _launch(name, "node-1", pservers, trainers)

    def all_running(self, key: str) -> JobStatus:
        return _all_running(self.backend, key, self.sizes[key])  # the AutoKubelet runs the pods

    def exit(self, key: str, worker: str, code: int) -> None:
        from tests.kube.kubelet import Kubelet

        pod = f"{key.partition('/')[2]}-{worker}"
        Kubelet(self.kube, self.backend.kube.api).end(self.NS, pod, code)

    def leftovers(self, key: str) -> list[str]:
        name = key.partition("/")[2]
        pods = [p["metadata"]["name"] for p in self.kube.list("pods", self.NS)]
        return [p for p in pods if p.startswith(f"{name}-")]

    def write_scratch(self, key: str, worker: str, n: int) -> None:
        raise AssertionError("the Kubernetes backend does not declare disk-usage")

    def reopen(self) -> Backend:
        from paddlecloud.backends.kubernetes.backend import KubernetesBackend
        from paddlecloud.backends.kubernetes.settings import KubeSettings
        from tests.kube.helpers import kube_client

        self.backend = KubernetesBackend(
            KubeSettings(grace_s=1), kube=kube_client(self.kube, "paddlecloud-server")
        )
        return self.backend


# -- Slurm: the private cluster of scripts/ensure-slurm.sh (tests/slurm) --------------------------


@dataclass
class SlurmHarness(LocalHarness):
    """The local harness's worker program, each worker a Slurm job on node n1 of the real cluster."""

    def _open(self) -> Backend:
        from paddlecloud.backends.slurm import SlurmBackend, SlurmSettings

        return SlurmBackend(SlurmSettings(root=self.root / "slurm", cleanup_grace=1), time.time, lambda: None)

    def _jobs_root(self) -> Path:
        return Path(self.backend.root) / "jobs"

    def launch(self, name: str, pservers: int = 0, trainers: int = 1) -> JobLaunch:
        from dataclasses import replace

        return replace(
            super().launch(name, pservers, trainers), placement=placement("n1", pservers, trainers)
        )

    def leftovers(self, key: str) -> list[str]:
        import subprocess

        out = subprocess.run(["squeue", "-h", "-o", "%i %T %k"], capture_output=True, text=True, check=True)
        return [ln for ln in out.stdout.splitlines() if ln.endswith(f"paddlecloud:{key}")]
