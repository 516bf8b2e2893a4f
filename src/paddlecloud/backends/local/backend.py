"""The local backend: the embedded single-machine cluster whose workers are OS processes.

Per job, under ``<root>/jobs/<user>/<name>/``::

    launch.json          endpoints and placement, written at start (re-adoption reads it back)
    package/             the unpacked job package;  workers/<worker>/  a private copy per worker
    logs/<worker>.<restart>.log, logs/prepare.log
    run/<worker>.pid.json, run/<worker>.exit.json

Start sequence (driven by ``sync``, effects applied under the job's lock)::

    PREPARING ──(thread: unpack, build venv, copy package)──▶ PSERVERS ──every pserver listens──▶
    TRAINERS ──all trainers succeeded──▶ STOPPING (pservers) ──▶ DONE
        └───────────── any failure ───────────▶ STOPPING (everything) ──▶ DONE
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from paddlecloud.backends.base import (
    BackendEvent,
    Capability,
    JobLaunch,
    JobStatus,
    LogRequest,
    NodeInfo,
    WorkerStatus,
)
from paddlecloud.backends.local.envs import EnvBuildError, EnvCache
from paddlecloud.backends.local.logs import read_logs
from paddlecloud.backends.local.nodes import NodeShape, make_nodes
from paddlecloud.backends.local.ports import PortAllocator, is_listening
from paddlecloud.backends.local.process import WorkerProc, stop_group
from paddlecloud.core.archive import ArchiveError, safe_extract
from paddlecloud.core.envcontract import Topology, WorkerContext, worker_env
from paddlecloud.core.phases import WorkerState
from paddlecloud.runtime.launcher import write_json_atomic
from paddlecloud.scheduler import WorkerPlacement

__all__ = ["LocalBackend", "LocalConfig"]

log = logging.getLogger("paddlecloud.backends.local")

_DROP_ENV = ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH", "PADDLECLOUD_")
_ENDED = frozenset({WorkerState.SUCCEEDED, WorkerState.FAILED, WorkerState.STOPPED, WorkerState.LOST})


class Stage(StrEnum):
    PREPARING = "preparing"
    PSERVERS = "pservers"
    TRAINERS = "trainers"
    STOPPING = "stopping"
    DONE = "done"


@dataclass(frozen=True)
class LocalConfig:
    root: Path
    nodes: NodeShape = field(default_factory=NodeShape)
    #: Grace period used when the backend itself stops workers (pservers after success, after a failure).
    cleanup_grace: float = 5.0


@dataclass
class _Job:
    launch: JobLaunch
    dir: Path
    topology: Topology
    workers: dict[str, WorkerProc]
    ports: list[int]
    stage: Stage = Stage.PREPARING
    env_dir: Path | None = None
    failure: str | None = None
    events: list[BackendEvent] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)
    stopper: threading.Thread | None = None
    prepared: threading.Event = field(default_factory=threading.Event)

    def role(self, role: str) -> list[WorkerProc]:
        return [w for w in self.workers.values() if w.role == role]


class LocalBackend:
    name = "local"
    # RESIZE is not declared yet: add_trainer / remove_trainer arrive with the elastic scheduler.
    capabilities = frozenset(
        {Capability.GPU, Capability.ADOPT, Capability.LOGS_PREVIOUS, Capability.LOGS_FOLLOW}
    )

    def __init__(self, config: LocalConfig, clock: Callable[[], float], wake: Callable[[], None]) -> None:
        self.config = config
        self._now = clock
        self._wake = wake
        self._nodes = make_nodes(config.nodes)
        self._gpu_machine = any(n.gpus for n in self._nodes)
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()
        self._ports = PortAllocator()
        self._envs = EnvCache(config.root / "envs")
        self._pythonpath = self._install_runtime_shim(config.root / "pythonpath")

    # -- contract -------------------------------------------------------------------------------

    def nodes(self) -> tuple[NodeInfo, ...]:
        return self._nodes

    def start(self, launch: JobLaunch) -> None:
        jdir = self._job_dir(launch.key)
        if jdir.exists():
            shutil.rmtree(jdir)  # a leftover of an earlier job with the same name
        for sub in ("logs", "run", "workers"):
            (jdir / sub).mkdir(parents=True, exist_ok=True)
        launch.output_dir.mkdir(parents=True, exist_ok=True)
        ports = [self._ports.allocate() for _ in range(len(launch.placement) + 2)]
        job = self._build(launch, jdir, ports)
        job.events.append(
            BackendEvent(
                "Normal", "Preparing", "unpacking the package and building its environment (logs -w prepare)"
            )
        )
        write_json_atomic(
            str(jdir / "launch.json"),
            {"ports": ports, "placement": [p.__dict__ for p in launch.placement]},
        )
        with self._lock:
            self._jobs[launch.key] = job
        self._prepare_async(job)

    def adopt(self, launch: JobLaunch) -> None:
        jdir = self._job_dir(launch.key)
        try:
            ports = list(json.loads((jdir / "launch.json").read_text())["ports"])
        except (OSError, ValueError, KeyError):
            self.start(launch)  # never got as far as recording its launch: start afresh
            return
        self._ports.reserve(ports)
        job = self._build(launch, jdir, ports)
        adopted = [w for w in job.workers.values() if w.load_pid_file()]
        if any(w.role == "trainer" for w in adopted):
            job.stage = Stage.TRAINERS
        elif adopted:
            job.stage = Stage.PSERVERS
        job.events.append(
            BackendEvent("Normal", "Adopted", f"re-adopted {len(adopted)} worker processes after a restart")
        )
        with self._lock:
            self._jobs[launch.key] = job
        if job.stage == Stage.PREPARING:
            self._prepare_async(job)
        else:
            job.env_dir = self._envs.path_for(self._requirements(job))
            job.prepared.set()

    def sync(self, key: str) -> JobStatus:
        job = self._get(key)
        if job is None:
            return JobStatus(failure="the backend has no record of this job", finished=True)
        with job.lock:
            self._advance(job)
            events, job.events = tuple(job.events), []
            return JobStatus(
                workers=self._statuses(job),
                failure=job.failure,
                finished=job.stage == Stage.DONE,
                events=events,
            )

    def stop(self, key: str, grace: float) -> None:
        job = self._get(key)
        if job is None:
            return
        with job.lock:
            job.stage = Stage.STOPPING
        stop_group(list(job.workers.values()), grace)
        with job.lock:
            self._finish(job)

    def add_trainer(self, key: str, placement: WorkerPlacement) -> None:
        raise NotImplementedError("live resize arrives with the elastic scheduler (issue 5)")

    def remove_trainer(self, key: str, grace: float) -> None:
        raise NotImplementedError("live resize arrives with the elastic scheduler (issue 5)")

    def read_log(self, req: LogRequest) -> Iterator[bytes]:
        jdir = self._job_dir(req.key)

        def ended(worker: str) -> bool:
            job = self._get(req.key)
            if job is None:
                return True
            if worker == "prepare":
                return job.prepared.is_set()
            if worker not in job.workers:
                return True
            with job.lock:
                return job.workers[worker].state(self._now()) in _ENDED or job.stage == Stage.DONE

        return read_logs(jdir / "logs", req, ended)

    def forget(self, key: str) -> None:
        with self._lock:
            job = self._jobs.pop(key, None)
        if job is not None:
            self._ports.release(job.ports)
        shutil.rmtree(self._job_dir(key), ignore_errors=True)

    def close(self) -> None:
        with self._lock:
            jobs = list(self._jobs.values())
        for job in jobs:
            if job.stopper is not None:
                job.stopper.join(timeout=self.config.cleanup_grace + 5)

    # -- internals ------------------------------------------------------------------------------

    def _get(self, key: str) -> _Job | None:
        with self._lock:
            return self._jobs.get(key)

    def _job_dir(self, key: str) -> Path:
        user, _, name = key.partition("/")
        return self.config.root / "jobs" / user / name

    def _build(self, launch: JobLaunch, jdir: Path, ports: list[int]) -> _Job:
        host = "127.0.0.1"
        eps = {p: f"{host}:{port}" for p, port in zip(launch.placement, ports, strict=False)}
        topology = Topology(
            pserver_endpoints=[eps[p] for p in launch.placement if p.role == "pserver"],
            trainer_endpoints=[eps[p] for p in launch.placement if p.role == "trainer"],
            gloo_endpoint=f"{host}:{ports[-2]}",
            master_endpoint=f"{host}:{ports[-1]}",
        )
        workers = {}
        for p in launch.placement:
            name = f"{p.role}-{p.index}"
            workers[name] = WorkerProc(
                name=name, role=p.role, index=p.index, node=p.node, endpoint=eps[p], gpus=p.gpus,
                cwd=jdir / "workers" / name, run_dir=jdir / "run",
                log_path=jdir / "logs" / f"{name}.0.log",
            )  # fmt: skip
        return _Job(launch=launch, dir=jdir, topology=topology, workers=workers, ports=ports)

    def _requirements(self, job: _Job) -> str:
        req = job.dir / "package" / "requirements.txt"
        return req.read_text(encoding="utf-8") if req.is_file() else ""

    def _prepare_async(self, job: _Job) -> None:
        t = threading.Thread(target=self._prepare, args=(job,), name=f"prepare-{job.launch.key}", daemon=True)
        t.start()

    def _prepare(self, job: _Job) -> None:
        try:
            pkg = job.dir / "package"
            if not pkg.exists():
                safe_extract(job.launch.package, pkg)
            job.env_dir = self._envs.ensure(self._requirements(job), job.dir / "logs" / "prepare.0.log")
            for w in job.workers.values():
                if not w.cwd.exists():
                    shutil.copytree(pkg, w.cwd, symlinks=True)
        except (ArchiveError, EnvBuildError, OSError) as exc:
            job.failure = f"preparing the job failed: {exc}"
        except Exception as exc:  # never leave a job Starting forever: fail it with the cause
            log.exception("preparing %s failed", job.launch.key)
            job.failure = f"preparing the job failed: {type(exc).__name__}: {exc}"
        finally:
            job.prepared.set()
            self._wake()

    def _advance(self, job: _Job) -> None:
        if job.stage == Stage.PREPARING and job.prepared.is_set():
            if job.failure:
                self._finish(job)
                return
            job.events.append(BackendEvent("Normal", "Prepared", "package unpacked and environment ready"))
            self._spawn(job, job.role("pserver") or job.role("trainer"))
            job.stage = Stage.PSERVERS if job.role("pserver") else Stage.TRAINERS
            if job.stage == Stage.PSERVERS:
                n = len(job.role("pserver"))
                job.events.append(
                    BackendEvent("Normal", "StartingPservers", f"waiting for {n} pservers to listen")
                )
        if job.stage == Stage.PSERVERS:
            self._check_pservers(job)
        if job.stage == Stage.TRAINERS:
            self._check_trainers(job)
        if job.stage == Stage.STOPPING and job.stopper is not None and not job.stopper.is_alive():
            self._finish(job)

    def _check_pservers(self, job: _Job) -> None:
        now = self._now()
        for w in job.role("pserver"):
            if w.state(now) in _ENDED:
                self._fail(job, f"{w.name} exited with code {w.exit_code} before the trainers started")
                return
        if all(is_listening("127.0.0.1", w.port) for w in job.role("pserver")):
            n = len(job.role("pserver"))
            job.events.append(BackendEvent("Normal", "PserversReady", f"all {n} pservers listen"))
            self._spawn(job, job.role("trainer"))
            job.stage = Stage.TRAINERS

    def _check_trainers(self, job: _Job) -> None:
        now = self._now()
        for w in job.workers.values():
            state = w.state(now)
            if state == WorkerState.FAILED:
                self._fail(
                    job, f"{w.name} failed with exit code {w.exit_code} (see: paddlecloud logs -w {w.name})"
                )
                return
            if state == WorkerState.LOST:
                self._fail(job, f"{w.name} vanished without an exit status (pid {w.pid})")
                return
            if state == WorkerState.SUCCEEDED and w.role == "pserver":
                self._fail(job, f"{w.name} exited before the trainers finished")
                return
        if all(w.state(now) == WorkerState.SUCCEEDED for w in job.role("trainer")):
            n = len(job.role("trainer"))
            job.events.append(BackendEvent("Normal", "TrainersSucceeded", f"all {n} trainers succeeded"))
            self._stop_async(job, job.role("pserver"))

    def _fail(self, job: _Job, message: str) -> None:
        job.failure = message
        job.events.append(BackendEvent("Warning", "WorkerFailed", message))
        self._stop_async(job, list(job.workers.values()))

    def _stop_async(self, job: _Job, workers: list[WorkerProc]) -> None:
        job.stage = Stage.STOPPING

        def run() -> None:
            stop_group(workers, self.config.cleanup_grace)
            self._wake()

        job.stopper = threading.Thread(target=run, name=f"stop-{job.launch.key}", daemon=True)
        job.stopper.start()

    def _finish(self, job: _Job) -> None:
        if job.stage != Stage.DONE:
            job.stage = Stage.DONE
            self._ports.release(job.ports)

    def _spawn(self, job: _Job, workers: list[WorkerProc]) -> None:
        base = {k: v for k, v in os.environ.items() if not k.startswith(_DROP_ENV)}
        assert job.env_dir is not None
        base["PATH"] = f"{job.env_dir / 'bin'}{os.pathsep}{base.get('PATH', '')}"
        base["VIRTUAL_ENV"] = str(job.env_dir)
        base["PYTHONPATH"] = str(self._pythonpath)
        now = self._now()
        for w in workers:
            ctx = WorkerContext(
                job_name=job.launch.name, user=job.launch.user, framework=job.launch.framework,
                role=w.role, index=w.index, topology=job.topology, output_dir=str(job.launch.output_dir),
                restart=w.restart, gpus=w.gpus if self._gpu_machine else None, user_env=job.launch.env,
                files=job.launch.files,
            )  # fmt: skip
            w.spawn(job.launch.entry, {**base, **worker_env(ctx)}, now)

    def _statuses(self, job: _Job) -> tuple[WorkerStatus, ...]:
        now = self._now()
        return tuple(
            WorkerStatus(
                name=w.name,
                role=w.role,
                index=w.index,
                state=w.state(now),
                node=w.node,
                endpoint=w.endpoint,
                pid=w.pid,
                restarts=w.restart,
                exit_code=w.exit_code,
                started_at=w.started_at,
                finished_at=w.finished_at,
                log_path=str(w.log_path),
            )
            for w in job.workers.values()
        )

    @staticmethod
    def _install_runtime_shim(target: Path) -> Path:
        """Put a stdlib-only copy of ``paddlecloud.runtime`` where worker programs can import it."""
        import paddlecloud.runtime as runtime_pkg

        src = Path(runtime_pkg.__file__).parent
        pkg = target / "paddlecloud"
        shutil.rmtree(pkg, ignore_errors=True)
        shutil.copytree(src, pkg / "runtime", ignore=shutil.ignore_patterns("__pycache__"))
        (pkg / "__init__.py").write_text('"""PaddleCloud worker runtime (stdlib only)."""\n')
        return target
