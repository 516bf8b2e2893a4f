"""The local backend: the embedded single-machine cluster whose workers are OS processes.

Per job, under ``<root>/jobs/<user>/<name>/``::

    launch.json          ports per worker and placement, rewritten on every resize, and the job's
                         rendezvous key (elastic torch: ``PADDLECLOUD_RDZV_KEY``); re-adoption
                         reads it back
    restarts.json        restarts made and pending (restart policies, ``restarts.py``)
    package/             the unpacked job package;  workers/<worker>/  a private copy per worker
    logs/<worker>.<run>.log, logs/prepare.<run>.log   one file per run, kept across preemptions
    run/<worker>.pid.json, run/<worker>/exit.json    (a sandboxed worker sees only run/<worker>/)
    tmp/<worker>/        a sandboxed worker's /tmp
    .trash/              scratch (package/, workers/, tmp/) of an ended job, being removed
    contract/membership.json   the job's trainers and endpoints now, rewritten on every resize
                         (``runtime.membership``; workers get its path, read only)

Start sequence (driven by ``sync``, effects applied under the job's lock)::

    PREPARING ──(thread: unpack, build venv, copy package)──▶ PSERVERS ──every pserver listens──▶
    TRAINERS ──all trainers succeeded──▶ STOPPING (pservers) ──▶ DONE
        └───────────── any failure ───────────▶ STOPPING (everything) ──▶ DONE

A worker the OS will not start (``Popen`` raises: a NUL byte, ``E2BIG``, a missing directory) fails
its job with reason ``StartFailed`` and the error as the message, like a worker that exited badly:
``sync`` never raises for it, so one job's bad spec cannot stop the reconcile loop.

Resize (capability ``resize``): ``add_trainer`` starts one more trainer with the job's current
endpoints (at once when trainers run, else with the others); ``remove_trainer`` retires the highest
trainer: it leaves the job's workers (so it never decides success or failure), is stopped gracefully
in the background and stays in the status as ``Stopped`` with its log.

Isolation (``LocalConfig.isolation``, ``isolation.py``): each worker, and each environment build, runs
in a bubblewrap sandbox that sees only its job's files, or unconfined with ``none``; a worker's
environment is built from a whitelist of the server's variables either way. A sandboxed job's
workers share a network namespace of their own (``node.netns``: ``pcj-<id>``, made before its first
worker starts, removed when the job is done): they reach each other over its loopback and the API
through their run's socket, nothing else. Every run is started through its monitor
(``node.monitor``) in a cgroup with its memory, CPU and pids limits, its log bounded
(``LocalConfig.limits``); an OOM kill is the worker's reason ``OOMKilled``.

Disk (``disk-usage``, ``backends/jobdirs.py``): ``disk_usage`` walks the job's directory (it counts
in the owner's storage quota); when the job ends its scratch (package/, workers/, tmp/) is dropped,
its logs stay until ``forget``.

Restart policies (``launch.restarts``): a worker that fails or is lost is either started again, as
the same worker with the current endpoints, after a backoff and in a later ``sync`` (the job goes
on), or fails the job; ``restarts.py`` keeps that bookkeeping and ``core.restarts`` decides.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from paddlecloud.backends.base import (
    RENDEZVOUS,
    BackendEvent,
    BackendSetup,
    Capability,
    Confinement,
    JobLaunch,
    JobStatus,
    LogRequest,
    NodeInfo,
    WorkerStatus,
)
from paddlecloud.backends.errors import BackendError, JobRejected, NotSupported
from paddlecloud.backends.images import ImageError, ImageStore
from paddlecloud.backends.jobdirs import drop_scratch, sweep_trash, walk_bytes
from paddlecloud.backends.local.envs import EnvBuildError, EnvCache, install_runtime_shim
from paddlecloud.backends.local.image_prep import ImageRuntimes, ImageUnusable, image_worker_env
from paddlecloud.backends.local.isolation import Confiners, choose_all
from paddlecloud.backends.local.jobstate import LocalConfig, LocalJob, image_record
from paddlecloud.backends.local.keeper import Keeper
from paddlecloud.backends.local.logs import log_runs, read_logs
from paddlecloud.backends.local.nodes import make_nodes
from paddlecloud.backends.local.ports import PortAllocator
from paddlecloud.backends.local.process import RunPlan, WorkerProc, kill_leftovers, stop_group, watch_exit
from paddlecloud.backends.local.restarts import RestartBook
from paddlecloud.backends.local.samplesets import LocalSampleSets
from paddlecloud.backends.local.sandbox import (
    ConfinementError,
    ImageRoot,
    JobJail,
    make_dirs,
    open_file_nofollow,
    worker_base_env,
)
from paddlecloud.backends.local.settings import LocalSettings
from paddlecloud.backends.samplesets import SAMPLESET_DIR_ENV
from paddlecloud.backends.start_sequence import SERVER_ROLES, Seen, Stage, Step, next_step, stage_after
from paddlecloud.core.archive import ArchiveError, safe_extract
from paddlecloud.core.envcontract import Topology, WorkerContext, new_rendezvous_key, worker_env
from paddlecloud.core.phases import ENDED_WORKER_STATES, WorkerReason, WorkerState
from paddlecloud.runtime import membership
from paddlecloud.runtime.launcher import write_json_atomic
from paddlecloud.scheduler import WorkerPlacement

__all__ = ["LocalBackend", "create"]

log = logging.getLogger("paddlecloud.backends.local")


class LocalBackend:
    name = "local"
    capabilities = frozenset(
        {
            Capability.GPU,
            Capability.RESIZE,
            Capability.ADOPT,
            Capability.LOGS_PREVIOUS,
            Capability.LOGS_FOLLOW,
            Capability.FIXED_CAPACITY,
            Capability.SAMPLESETS,
            Capability.DISK_USAGE,
            Capability.IMAGES,
        }
    )

    def __init__(self, config: LocalConfig, clock: Callable[[], float], wake: Callable[[], None]) -> None:
        self.config = config
        self._now = clock
        self._wake = wake
        self._nodes = make_nodes(config.nodes)
        self._gpu_machine = any(n.gpus for n in self._nodes)
        self._jobs: dict[str, LocalJob] = {}
        self._lock = threading.Lock()
        self._ports = PortAllocator()
        self._pythonpath = self._install_runtime_shim(config.root / "pythonpath")
        self._confine: Confiners = choose_all(
            config.isolation, self._pythonpath, gpus=self._gpu_machine,
            private=(config.root, *config.private), cgroup_root=config.cgroup_root, limits=config.limits,
        )  # fmt: skip
        self._sandbox, self.isolation = self._confine.sandbox, self._confine.isolation
        self._keeper = Keeper(config.root, self._confine)
        self._envs = EnvCache(config.root / "envs", config.env_cache_bytes, sandbox=self._sandbox)
        #: pulled and unpacked images, per digest, and the jobs' environments in them
        images = ImageStore(
            config.root / "images", frozenset(config.insecure_registries), config.image_cache_bytes
        )
        self._runtimes = ImageRuntimes(images, self._envs, confined=self._sandbox is not None)
        self._collect()
        #: SampleSets: a JuiceFS mount per emulated node (``samplesets.py``)
        self.samplesets = LocalSampleSets(config.root / "samplesets", [n.name for n in self._nodes])
        sweep_trash(config.root / "jobs")  # scratch an earlier server had not finished removing

    # -- contract -------------------------------------------------------------------------------

    def nodes(self) -> tuple[NodeInfo, ...]:
        return self._nodes

    def start(self, launch: JobLaunch) -> None:
        self._collect()
        jdir = self._job_dir(launch.key)
        if launch.attempt == 0:
            shutil.rmtree(jdir, ignore_errors=True)  # a leftover of an earlier job with the same name
        else:  # started again after a preemption: earlier runs' logs (and the package) stay
            for sub in ("run", "workers"):
                shutil.rmtree(jdir / sub, ignore_errors=True)
        for sub in ("logs", "run", "workers", "contract"):
            (jdir / sub).mkdir(parents=True, exist_ok=True)
        try:
            make_dirs(launch.output_dir)  # never through a link a job planted in its home
        except ConfinementError as exc:
            log.warning("%s: output not created: %s", launch.key, exc)
        ports = [self._ports.allocate() for _ in range(len(launch.placement) + 2)]
        job = self._build(launch, jdir, ports, {}, new_rendezvous_key())
        job.book.save(job.workers.values())  # a re-run (after a preemption) starts every worker afresh
        job.events.append(
            BackendEvent(
                "Normal", "Preparing", "unpacking the package and building its environment (logs -w prepare)"
            )
        )
        self._record_launch(job)
        with self._lock:
            self._jobs[launch.key] = job
        self._prepare_async(job)

    def adopt(self, launch: JobLaunch) -> None:
        jdir = self._job_dir(launch.key)
        try:
            recorded = json.loads((jdir / "launch.json").read_text())
            ports = [int(p) for p in recorded["ports"]]
            by_name = {str(k): int(v) for k, v in recorded.get("worker_ports", {}).items()}
            key = str(recorded.get("rendezvous_key") or "")
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            self.start(launch)  # never got as far as recording its launch: start afresh
            return
        self._ports.reserve(ports)
        job = self._build(launch, jdir, ports, by_name, key or new_rendezvous_key())
        image = recorded.get("image")
        if isinstance(image, dict) and image.get("rootfs"):
            job.image = ImageRoot(Path(str(image["rootfs"])), str(image.get("python") or ""))
            job.image_env = tuple(str(e) for e in image.get("env") or ())
        if not key:  # recorded by an earlier version: trainers started from now on agree on this one
            self._record_launch(job)
        adopted = [w for w in job.workers.values() if w.load_pid_file()]
        for w in job.book.restore(job.workers):  # waiting for a restart when the server stopped
            self._wake_at(w)
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
            try:  # mounted again after the restart (running workers keep the view they had)
                self._attach_sampleset(job)
            except BackendError as exc:
                log.warning("%s: SampleSet not mounted again: %s", launch.key, exc)
            self._runtimes.pin(
                self._requirements(job), launch.key, job.image
            )  # in use until its processes end
            job.env_dir = self._envs.path_for(self._requirements(job), job.image)
            job.prepared.set()

    def sync(self, key: str) -> JobStatus:
        job = self._get(key)
        if job is None:
            return JobStatus(failure="the backend has no record of this job", finished=True)
        with job.lock:
            self._advance(job)
            # a worker that ended badly after its check in this pass would be reported Failed although
            # the next pass restarts it: check again so the report and the decision agree
            for _ in range(2):
                if not self._unhandled_end(job):
                    break
                self._advance(job)
            events, job.events = tuple(job.events), []
            return JobStatus(
                workers=self._statuses(job),
                failure=job.failure,
                failure_reason=job.failure_reason,
                finished=job.stage == Stage.DONE,
                events=events,
            )

    def stop(self, key: str, grace: float) -> None:
        job = self._get(key)
        if job is None:
            return
        with job.lock:
            job.stage = Stage.STOPPING
            workers = [*job.workers.values(), *job.retired.values()]
        stop_group(workers, grace)
        with job.lock:
            self._finish(job)

    def add_trainer(self, key: str, placement: WorkerPlacement) -> None:
        job = self._get(key)
        if placement.role != "trainer":
            raise NotSupported(self.name, f"adding a {placement.role} to a running job")
        if job is None:
            raise JobRejected(f"cannot add trainer-{placement.index} to {key}: no such job here")
        with job.lock:
            if job.stage in (Stage.STOPPING, Stage.DONE):
                return  # the job is ending: nothing to grow
            name = f"trainer-{placement.index}"
            port = self._ports.allocate()
            job.ports.append(port)
            job.retired.pop(name, None)
            w = self._worker(job, placement, f"127.0.0.1:{port}")
            job.workers[name] = w
            self._retopology(job)
            job.events.append(BackendEvent("Normal", "TrainerAdded", f"{name} added on {placement.node}"))
            if job.stage == Stage.TRAINERS:
                self._spawn(job, [w])  # a failure fails the job (its status says so)

    def remove_trainer(self, key: str, grace: float) -> None:
        job = self._get(key)
        if job is None:
            return
        with job.lock:
            trainers = sorted(job.role("trainer"), key=lambda w: w.index)
            if len(trainers) <= 1 or job.stage in (Stage.STOPPING, Stage.DONE):
                return  # never below one trainer; an ending job is stopped whole
            w = trainers[-1]
            del job.workers[w.name]
            job.retired[w.name] = w
            w.stopped = True
            self._retopology(job)
            job.events.append(BackendEvent("Normal", "TrainerRemoved", f"{w.name} retired (graceful stop)"))

        def run() -> None:
            stop_group([w], grace)
            self._ports.release([w.port])
            self._wake()

        threading.Thread(target=run, name=f"retire-{key}-{w.name}", daemon=True).start()

    def read_log(self, req: LogRequest) -> Iterator[bytes]:
        jdir = self._job_dir(req.key)

        def ended(worker: str) -> bool:
            job = self._get(req.key)
            if job is None:
                return True
            if worker == "prepare":
                return job.prepared.is_set()
            with job.lock:
                w = job.workers.get(worker) or job.retired.get(worker)
                return w is None or w.state(self._now()) in ENDED_WORKER_STATES or job.stage == Stage.DONE

        return read_logs(jdir / "logs", req, ended)

    def disk_usage(self, key: str) -> Iterator[int]:
        return walk_bytes(self._job_dir(key))

    def forget(self, key: str) -> None:
        with self._lock:
            job = self._jobs.pop(key, None)
        if job is not None:
            self._ports.release(job.ports)
        self.samplesets.detach(key)
        shutil.rmtree(self._job_dir(key), ignore_errors=True)

    def confinement(self) -> Confinement:
        return Confinement(str(self.isolation), self._confine.confined)

    def close(self) -> None:
        with self._lock:
            jobs = list(self._jobs.values())
        for job in jobs:
            if job.stopper is not None:
                job.stopper.join(timeout=self.config.cleanup_grace + 5)
        self.samplesets.close()  # mounted again by the controller's ensure after a restart
        # namespaces no process lives in go (running jobs keep theirs; one whose workers are all
        # between runs gets it again at its next start: Keeper.open_net)
        self._keeper.collect(set())

    # -- internals ------------------------------------------------------------------------------

    def _get(self, key: str) -> LocalJob | None:
        with self._lock:
            return self._jobs.get(key)

    def _job_dir(self, key: str) -> Path:
        user, _, name = key.partition("/")
        return self.config.root / "jobs" / user / name

    def _build(
        self, launch: JobLaunch, jdir: Path, ports: list[int], by_name: dict[str, int], rendezvous_key: str
    ) -> LocalJob:
        """The job's runtime record. Workers listen on ``by_name[worker]`` when recorded (a resized
        job), else on ``ports`` in placement order; the last two ports are the gloo and master stores."""
        host = "127.0.0.1"
        job = LocalJob(
            launch=launch,
            dir=jdir,
            topology=Topology(
                (), (), gloo_endpoint=f"{host}:{ports[-2]}", master_endpoint=f"{host}:{ports[-1]}"
            ),
            workers={},
            ports=ports,
            book=RestartBook.load(launch.restarts, jdir / "restarts.json"),
            rendezvous_key=rendezvous_key,
        )
        for p, port in zip(launch.placement, ports, strict=False):
            name = f"{p.role}-{p.index}"
            job.workers[name] = self._worker(job, p, f"{host}:{by_name.get(name, port)}")
        if launch.framework == "torch" and launch.trainer_range is not None:
            store = self._worker(
                job, WorkerPlacement(RENDEZVOUS, 0, launch.placement[0].node), job.topology.master_endpoint
            )
            store.command = f"python -m paddlecloud.runtime.rendezvous {store.port}"
            job.workers[store.name] = store
        self._retopology(job, record=False)
        return job

    @staticmethod
    def _worker(job: LocalJob, p: WorkerPlacement, endpoint: str) -> WorkerProc:
        """A worker whose log is the next run's file (earlier runs are kept)."""
        name = f"{p.role}-{p.index}"
        runs = log_runs(job.dir / "logs", name)
        return WorkerProc(
            name=name, role=p.role, index=p.index, node=p.node, endpoint=endpoint, gpus=p.gpus,
            cwd=job.dir / "workers" / name, run_dir=job.dir / "run",
            log_path=job.dir / "logs" / f"{name}.{runs[-1] + 1 if runs else 0}.log",
            restart=runs[-1] + 1 if runs else 0,
        )  # fmt: skip

    def _retopology(self, job: LocalJob, record: bool = True) -> None:
        """Endpoints from the current workers (by index); rewrite launch.json after a resize."""

        def eps(role: str) -> list[str]:
            return [w.endpoint for w in sorted(job.role(role), key=lambda w: w.index)]

        job.topology = dataclasses.replace(
            job.topology, pserver_endpoints=eps("pserver"), trainer_endpoints=eps("trainer")
        )
        self._publish_membership(job)
        if record:
            self._record_launch(job)

    @staticmethod
    def _publish_membership(job: LocalJob) -> None:
        """Rewrite ``contract/membership.json`` for the running workers (``runtime.membership``)."""
        job.membership_version = max(job.membership_version + 1, membership.now_version())
        t = job.topology
        m = membership.Membership(
            version=job.membership_version,
            trainers=len(t.trainer_endpoints),
            trainer_endpoints=tuple(t.trainer_endpoints),
            pserver_endpoints=tuple(t.pserver_endpoints),
        )
        path = job.dir / "contract" / "membership.json"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            membership.write(str(path), m)
        except OSError as exc:  # workers keep the last one; the job goes on
            log.warning("publishing the membership of %s failed: %s", job.launch.key, exc)

    @staticmethod
    def _record_launch(job: LocalJob) -> None:
        placement = [
            {"role": w.role, "index": w.index, "node": w.node, "gpus": list(w.gpus)}
            for w in job.workers.values()
        ]
        write_json_atomic(
            str(job.dir / "launch.json"),
            {
                "ports": job.ports,
                "worker_ports": job.worker_ports(),
                "placement": placement,
                "rendezvous_key": job.rendezvous_key,
                # the image the workers run in: a server that adopts the job starts its next runs there too
                "image": image_record(job),
            },
        )

    def _requirements(self, job: LocalJob) -> str:
        req = job.dir / "package" / "requirements.txt"
        return req.read_text(encoding="utf-8") if req.is_file() else ""

    def _prepare_async(self, job: LocalJob) -> None:
        t = threading.Thread(target=self._prepare, args=(job,), name=f"prepare-{job.launch.key}", daemon=True)
        t.start()

    def _prepare(self, job: LocalJob) -> None:
        try:
            pkg = job.dir / "package"
            if not pkg.exists():  # the package lies in the owner's home: opened without following links
                with open_file_nofollow(job.launch.package) as package:
                    safe_extract(package, pkg)
            runs = log_runs(job.dir / "logs", "prepare")
            prepare_log = job.dir / "logs" / f"prepare.{runs[-1] + 1 if runs else 0}.log"
            requirements = self._requirements(job)
            if job.launch.image is not None:
                job.env_dir = self._prepare_image(job, requirements, prepare_log)
            else:
                job.env_dir = self._envs.ensure(requirements, prepare_log, job.launch.key)
            with job.lock:
                workers = list(job.workers.values())
            for w in workers:
                if not w.cwd.exists():
                    shutil.copytree(pkg, w.cwd, symlinks=True)
            jail = self._jail(job)
            if jail is not None:
                jail.check()  # every place the workers will see can be bound
            self._attach_sampleset(job)
        except ImageError as exc:
            job.failure, job.failure_reason = f"pulling {job.launch.image} failed: {exc}", str(exc.problem)
        except ImageUnusable as exc:
            job.failure, job.failure_reason = str(exc), "ImageUnusable"
        except (ArchiveError, EnvBuildError, OSError, ConfinementError) as exc:
            job.failure = f"preparing the job failed: {exc}"
        except BackendError as exc:  # the SampleSet cannot be mounted
            ref = job.launch.sampleset
            job.failure = f"mounting the SampleSet {ref.name if ref else ''} failed: {exc}"
        except Exception as exc:  # never leave a job Starting forever: fail it with the cause
            log.exception("preparing %s failed", job.launch.key)
            job.failure = f"preparing the job failed: {type(exc).__name__}: {exc}"
        finally:
            job.prepared.set()
            if job.stage == Stage.DONE:  # stopped while it prepared: what it made is scratch
                drop_scratch(job.dir)
                self._runtimes.release(self._requirements(job), job.launch.key, job.image)  # held now
            self._wake()

    def _advance(self, job: LocalJob) -> None:
        if job.stage == Stage.PREPARING and job.prepared.is_set():
            if job.failure:
                self._finish(job)
                return
            job.events.append(BackendEvent("Normal", "Prepared", "package unpacked and environment ready"))
            step = next_step(job.stage, self._seen(job, self._now()), prepared=True)
            if not self._spawn(job, job.servers() if step == Step.START_SERVERS else job.role("trainer")):
                return
            job.stage = stage_after(step, job.stage)
            if job.stage == Stage.PSERVERS:
                names = ", ".join(sorted(w.name for w in job.servers()))
                job.events.append(BackendEvent("Normal", "StartingServers", f"waiting for {names} to listen"))
        if job.stage == Stage.PSERVERS:
            self._check_pservers(job)
        if job.stage == Stage.TRAINERS:
            self._check_trainers(job)
        if job.stage == Stage.STOPPING and job.stopper is not None and not job.stopper.is_alive():
            self._finish(job)

    @staticmethod
    def _seen(job: LocalJob, now: float) -> list[Seen]:
        """The workers as the start sequence sees them (``backends.start_sequence``): a server
        listens once its monitor wrote its ready mark (asked only while the servers start)."""
        ask = job.stage == Stage.PSERVERS
        seen = []
        for w in job.workers.values():
            state = w.state(now)
            ready = ask and w.role in SERVER_ROLES and state == WorkerState.RUNNING and w.ready_file.exists()
            seen.append(Seen(w.name, w.role, state, ready))
        return seen

    def _plan(self, job: LocalJob, w: WorkerProc, hold: int = -1) -> RunPlan:
        """How ``w``'s next run is kept (``keeper.py``): its role's --memory and --cpu, the pids
        limit, the job's network namespace, the API relay, the log cap."""
        launch = job.launch
        need = Keeper.need(launch.resources, w.role, helper=w.command is not None)
        plan = dataclasses.replace(
            self._keeper.plan(launch.key, launch.user, launch.api.url, need), hold_fd=hold
        )
        return dataclasses.replace(plan, ready_port=w.port) if w.role in SERVER_ROLES else plan

    def _collect(self) -> None:
        """What runs left that no server saw end goes (``Keeper.collect``)."""
        with self._lock:
            live = {k for k, j in self._jobs.items() if j.stage != Stage.DONE}
        self._keeper.collect(live)

    def _unhandled_end(self, job: LocalJob) -> bool:
        """A worker of a running job ended badly and no restart or failure was decided for it yet."""
        if job.failure is not None or job.stage not in (Stage.PSERVERS, Stage.TRAINERS):
            return False
        now = self._now()
        return any(
            w.name not in job.retired and w.state(now) in (WorkerState.FAILED, WorkerState.LOST)
            for w in job.workers.values()
        )

    def _check_pservers(self, job: LocalJob) -> None:
        now = self._now()
        for w in job.servers():
            state = w.state(now)
            if state in ENDED_WORKER_STATES and not self._restart_or_fail(job, w, state, now):
                return
        if not self._spawn_due(job, now):
            return
        step = next_step(job.stage, self._seen(job, now))
        if step == Step.START_TRAINERS:
            names = ", ".join(sorted(w.name for w in job.servers()))
            job.events.append(BackendEvent("Normal", "ServersReady", f"{names} listen"))
            if self._spawn(job, job.role("trainer")):
                job.stage = stage_after(step, job.stage)

    def _check_trainers(self, job: LocalJob) -> None:
        now = self._now()
        for w in list(job.workers.values()):
            state = w.state(now)
            if state == WorkerState.SUCCEEDED and w.role in SERVER_ROLES:
                self._fail(job, f"{w.name} exited before the trainers finished")
                return
            if state in (WorkerState.FAILED, WorkerState.LOST) and not self._restart_or_fail(
                job, w, state, now
            ):
                return
        if not self._spawn_due(job, now):
            return
        if next_step(job.stage, self._seen(job, now)) == Step.STOP_SERVERS:
            n = len(job.role("trainer"))
            job.events.append(BackendEvent("Normal", "TrainersSucceeded", f"all {n} trainers succeeded"))
            self._stop_async(job, job.servers())

    def _restart_or_fail(self, job: LocalJob, w: WorkerProc, state: WorkerState, now: float) -> bool:
        """``w`` ended badly: schedule its restart (True) or fail the job (False), by its policy."""
        if state not in (WorkerState.FAILED, WorkerState.LOST):  # a pserver ended before the trainers
            self._fail(job, f"{w.name} exited with code {w.exit_code} before the trainers started")
            return False
        outcome = job.book.on_failure(w, now)
        if isinstance(outcome, str):
            if w.reason == WorkerReason.OOM_KILLED:  # what to change: the job's reason says it
                self._fail(job, f"{outcome}: {w.message} (see: paddlecloud logs -w {w.name})", w.reason)
            else:
                self._fail(job, f"{outcome} (see: paddlecloud logs -w {w.name})")
            return False
        nxt, event = outcome
        kill_leftovers(w)  # anything the failed run left behind would hold the worker's port
        job.workers[w.name] = nxt
        job.events.append(event)
        job.book.save(job.workers.values())
        self._wake_at(nxt)
        return True

    def _spawn_due(self, job: LocalJob, now: float) -> bool:
        """Start the restarted workers whose backoff has passed (current endpoints, same identity);
        False if one could not be started (the job is failing)."""
        due = job.book.due(job.workers.values(), now)
        for w in due:
            w.restart_at = None
        started = True
        if due:
            started = self._spawn(job, due)
            job.book.save(job.workers.values())
        return started

    def _wake_at(self, w: WorkerProc) -> None:
        """Wake the reconcile loop when ``w``'s restart is due, so the respawn waits for no tick."""
        delay = max((w.restart_at or 0.0) - self._now(), 0.0)
        timer = threading.Timer(delay, self._wake)
        timer.daemon = True
        timer.start()

    def _fail(self, job: LocalJob, message: str, reason: str = "WorkerFailed") -> None:
        job.failure, job.failure_reason = message, reason
        job.events.append(BackendEvent("Warning", reason, message))
        self._stop_async(job, list(job.workers.values()))

    def _stop_async(self, job: LocalJob, workers: list[WorkerProc]) -> None:
        job.stage = Stage.STOPPING

        def run() -> None:
            stop_group(workers, self.config.cleanup_grace)
            self._wake()

        job.stopper = threading.Thread(target=run, name=f"stop-{job.launch.key}", daemon=True)
        job.stopper.start()

    def _finish(self, job: LocalJob) -> None:
        if job.stage != Stage.DONE:
            job.stage = Stage.DONE
            self._keeper.close_net(job.launch.key)
            self._ports.release(job.ports)
            self._runtimes.release(
                self._requirements(job), job.launch.key, job.image
            )  # evictable from now on
            self.samplesets.detach(job.launch.key)  # its mounts may be unmounted from now on
            if job.prepared.is_set():  # else the preparation drops it when it ends
                drop_scratch(job.dir)  # retention: the copies and /tmp go now, logs stay

    def _attach_sampleset(self, job: LocalJob, nodes: tuple[str, ...] = ()) -> None:
        """Mount the job's SampleSet on its workers' nodes (and ``nodes``) and keep it mounted
        while the job runs; BackendError when it cannot be."""
        ref = job.launch.sampleset
        if ref is not None:
            with job.lock:
                want = {w.node for w in job.workers.values()} | set(nodes) | set(job.sampleset_mounts)
            job.sampleset_mounts = self.samplesets.attach(ref, job.launch.key, sorted(want))

    def _jail(self, job: LocalJob) -> JobJail | None:
        """What the job's workers are confined to (None: isolation none)."""
        assert job.env_dir is not None
        if self._sandbox is None:
            return None
        return self._sandbox.jail(job.launch, job.env_dir, shared=(job.dir / "contract",), image=job.image)

    def _prepare_image(self, job: LocalJob, requirements: str, prepare_log: Path) -> Path:
        """Pull and check the job's image, then its runtime environment in it (``image_prep``);
        raises what fails the job."""

        def say(event: BackendEvent) -> None:
            with job.lock:
                job.events.append(event)

        made = self._runtimes.prepare(job.launch, requirements, prepare_log, say)
        job.image, job.image_env = made.image, made.env
        self._record_launch(job)  # with its image, for a server that adopts the job
        return made.venv

    def _spawn(self, job: LocalJob, workers: list[WorkerProc]) -> bool:
        """Start ``workers``; False if the OS refused one: the job then fails (``StartFailed``) and
        what was started is stopped."""
        try:
            self._spawn_all(job, workers)
        except Exception as exc:  # Popen: ValueError (NUL byte), OSError (E2BIG, ENOENT), ...
            log.warning("starting a worker of %s failed: %s", job.launch.key, exc)
            failed = next((w.name for w in workers if w.pid is None), "a worker")
            self._fail(job, f"{failed} could not be started: {type(exc).__name__}: {exc}", "StartFailed")
            return False
        return True

    def _spawn_all(self, job: LocalJob, workers: list[WorkerProc]) -> None:
        assert job.env_dir is not None
        base = worker_base_env(
            os.environ, self.config.pass_env, sandboxed=self._sandbox is not None, env_dir=job.env_dir,
            shim=self._pythonpath, user=job.launch.user,
        )  # fmt: skip
        if job.image is not None:
            base = image_worker_env(base, job.image_env)
        jail = self._jail(job)
        # the job's namespace, made before its first worker and held until they are all started
        # (their monitors keep the hold for their runs: it is never removed under them)
        hold = self._keeper.open_net(job.launch.key) if jail is not None else -1
        try:
            self._spawn_each(job, workers, jail, base, hold)
        finally:
            if hold >= 0:
                os.close(hold)

    def _spawn_each(self, job: LocalJob, workers: list[WorkerProc], jail: JobJail | None,
                    base: dict[str, str], hold: int) -> None:  # fmt: skip
        now = self._now()
        for w in workers:
            if not w.cwd.exists():  # added after the package was copied for the others
                shutil.copytree(job.dir / "package", w.cwd, symlinks=True)
            if job.launch.sampleset is not None and w.command is None:
                if w.node not in job.sampleset_mounts:  # added on a node it was not mounted on
                    self._attach_sampleset(job, (w.node,))
                w.sampleset = job.sampleset_mounts[w.node]  # bound read-only in its sandbox
            if w.command is not None:  # a platform helper: no user contract, never on GPUs
                env = {**base, "PYTHONUNBUFFERED": "1", "CUDA_VISIBLE_DEVICES": ""}
                w.spawn(w.command, env, now, jail, self._plan(job, w, hold))
                watch_exit(w, self._wake)
                continue
            ctx = WorkerContext(
                job_name=job.launch.name, user=job.launch.user, framework=job.launch.framework,
                role=w.role, index=w.index, topology=job.topology, output_dir=str(job.launch.output_dir),
                restart=w.restart, gpus=w.gpus if self._gpu_machine else None, user_env=job.launch.env,
                files=job.launch.files, api=job.launch.api, trainer_range=job.launch.trainer_range,
                membership_file=str(job.dir / "contract" / "membership.json"),
                rendezvous_key=job.rendezvous_key,
            )  # fmt: skip
            extra = {SAMPLESET_DIR_ENV: str(w.sampleset)} if w.sampleset is not None else {}
            w.spawn(
                job.launch.entry, {**base, **worker_env(ctx), **extra}, now, jail, self._plan(job, w, hold)
            )
            watch_exit(w, self._wake)

    def _statuses(self, job: LocalJob) -> tuple[WorkerStatus, ...]:
        now = self._now()

        def state(w: WorkerProc) -> WorkerState:
            s = w.state(now)
            if w.name in job.retired and (s in ENDED_WORKER_STATES or w.pid is None):
                return WorkerState.STOPPED  # retired, possibly before it (re)started
            if w.restart_at is not None and job.stage == Stage.DONE:
                return WorkerState.STOPPED  # its restart was cancelled: the job ended
            return s

        return tuple(
            WorkerStatus(
                name=w.name,
                role=w.role,
                index=w.index,
                state=state(w),
                node=w.node,
                endpoint=w.endpoint,
                pid=w.pid,
                restarts=w.restart,
                exit_code=w.exit_code,
                started_at=w.started_at,
                finished_at=w.finished_at,
                log_path=str(w.log_path),
                reason=w.reason,
                message=w.message,
            )
            for w in [*job.workers.values(), *job.retired.values()]
        )

    @staticmethod
    def _install_runtime_shim(target: Path) -> Path:
        return install_runtime_shim(target)


def create(setup: BackendSetup) -> LocalBackend:
    """The registry's factory: a local backend from :class:`LocalSettings` (``backends.registry``)."""
    settings: LocalSettings = setup.settings
    config = LocalConfig(
        root=setup.cluster_dir, nodes=settings.nodes, env_cache_bytes=settings.env_cache_bytes,
        isolation=settings.isolation, pass_env=settings.pass_env, private=(setup.data_dir,),
        limits=settings.limits, cgroup_root=settings.cgroup_root,
        insecure_registries=settings.insecure_registries, image_cache_bytes=settings.image_cache_bytes,
    )  # fmt: skip
    return LocalBackend(config, setup.now, setup.wake)
