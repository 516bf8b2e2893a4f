"""The Slurm backend: every worker of a job is one Slurm batch job (docs/slurm.md).

Per job, under ``<root>/jobs/<user>/<name>/`` (``root`` on a file system every node sees)::

    record.json          ports, stage and, per worker, its current run and Slurm job id (adoption)
    package/             the unpacked job package;  workers/<worker>/  a private copy per worker
    logs/<worker>.<run>.log    one file per run (sbatch --output), kept across restarts
    run/<worker>.<run>/exit.json   the launcher's exit status of that run (the only folder of
                         run/ a sandboxed worker can write)
    run/<worker>.<run>.jail.json   isolation sandbox: that run's confinement (``jail.py``)
    tmp/<worker>/        a sandboxed worker's /tmp
    .trash/              scratch (package/, workers/, tmp/) of an ended job, being removed
    contract/membership.json   the job's trainers and endpoints now (``runtime.membership``)

Each worker is ``sbatch --wrap "python -m paddlecloud.runtime.launcher ..."`` named
``pc-<user>-<job>-<worker>-r<run>`` with ``-n1 -c CPUS --mem M [--gres=gpu:N] --nodelist NODE
--no-requeue`` and the worker's environment (the env contract) exported to it. The node is the one
our scheduler placed the worker on, from the snapshot :meth:`SlurmBackend.nodes` took of Slurm (what
other users hold included); a restarted worker is submitted without a node and Slurm picks one, its
endpoint then being resolved once it runs (``squeue`` names its node).

Start sequence (driven by ``sync``)::

    start ──submit pservers──▶ PSERVERS ──every pserver RUNNING and listening──▶ submit trainers ──▶
    TRAINERS ──all trainers succeeded──▶ STOPPING (scancel pservers) ──▶ DONE
        └──── a failure (no restart left) ────▶ STOPPING (scancel everything) ──▶ DONE

Ports come from ``--slurm-ports``, unique among the server's live workers and free on the server's
host; the node's launcher checks a server's port there before its program starts. A server that
finds its port held by another process on its node (``PortHeld``) is moved to another port on the
same node before any trainer has started (``PortMoved``; not a restart; at most ``_PORT_MOVES``
per job), the trainers then getting the new endpoint.

Status comes from one ``squeue --json`` per ``sync`` for all the job's Slurm jobs, and the exit code
from the launcher's status file; a Slurm job that ended without one (NODE_FAIL, TIMEOUT, PREEMPTED,
CANCELLED by someone else) is reported as ``Lost`` with Slurm's state and reason, and restarted or
fails the job per the restart policy (``core.restarts``). One that Slurm ended ``OUT_OF_MEMORY``
(its cgroup's limit is its ``--mem``: ``task/cgroup``) has ``Failed`` with reason ``OOMKilled`` and
its limit in the message (``commands.oom_message``).

Isolation (``SlurmSettings.isolation``, docs/security.md): with ``sandbox`` (``auto``: where
bubblewrap works on the server's host) the batch script runs ``python -I -m
paddlecloud.backends.slurm.jail run/<worker>.<run>.jail.json`` instead of the launcher: on its node
it builds the local backend's bubblewrap jail (``backends/local/sandbox.py``) from that spec and
execs ``bwrap``, which runs the launcher under the job's own interpreter and sees only the job's
places; the worker's environment is the local backend's whitelist plus the env contract.

Disk (``disk-usage``, ``backends/jobdirs.py``): ``disk_usage`` walks the job's directory on the
shared dir (it counts in the owner's storage quota); when the job ends its environment is released
and its scratch (package/, workers/, tmp/) dropped; logs, statuses and the record stay until
``forget``. What a worker writes on its node outside its folders (none, sandboxed) is not seen.

SampleSets (``samplesets.py``, ``samplenode.py``): the volume and its admin mount (sync, rmr) on the
server's host; warmup and clear as Slurm jobs on the nodes; a job's worker mounts the SampleSet on
its node for its run (``PADDLECLOUD_SAMPLESET_DIR``, read-only) before it starts.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import shutil
import threading
import time
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
from paddlecloud.backends.errors import JobRejected, NotSupported
from paddlecloud.backends.images import ImageError, ImageStore
from paddlecloud.backends.jobdirs import drop_scratch, sweep_trash, walk_bytes
from paddlecloud.backends.local.envs import EnvBuildError, EnvCache, install_runtime_shim
from paddlecloud.backends.local.image_prep import ImageRuntimes, ImageUnusable
from paddlecloud.backends.local.logs import log_runs, read_logs
from paddlecloud.backends.local.sandbox import (
    ConfinementError,
    choose,
    make_dirs,
)
from paddlecloud.backends.slurm import capacity, endings, ports, probe
from paddlecloud.backends.slurm import commands as sc
from paddlecloud.backends.slurm.job_record import JobRecord, WorkerRecord, read_record, write_record
from paddlecloud.backends.slurm.samplesets import SlurmSampleSets
from paddlecloud.backends.slurm.script import (
    BatchScripts,
    log_file,
    port_free_file,
    ready_file,
    status_file,
)
from paddlecloud.backends.slurm.settings import SlurmSettings
from paddlecloud.backends.start_sequence import SERVER_ROLES, Seen, Stage, Step, next_step, stage_after
from paddlecloud.core.archive import ArchiveError, safe_extract
from paddlecloud.core.envcontract import Topology
from paddlecloud.core.phases import ENDED_WORKER_STATES, WorkerReason, WorkerState
from paddlecloud.core.resources import Resources
from paddlecloud.core.restarts import Exit, Restart, decide
from paddlecloud.node import netns
from paddlecloud.runtime import membership
from paddlecloud.scheduler import WorkerPlacement

__all__ = ["SlurmBackend", "create"]

log = logging.getLogger("paddlecloud.backends.slurm")

#: the VXLAN ids handed to jobs (the lower ones are left to the site)
_FIRST_VNI, _LAST_VNI = 4096, 2**24 - 1
#: how many ports found held on their nodes a job's servers are moved past (``_move_port``)
_PORT_MOVES = 4


class SlurmBackend:
    name = "slurm"
    capabilities = frozenset(
        {
            Capability.GPU,
            Capability.RESIZE,
            Capability.ADOPT,
            Capability.LOGS_PREVIOUS,
            Capability.LOGS_FOLLOW,
            Capability.FIXED_CAPACITY,
            Capability.SHARED_CAPACITY,
            Capability.WHOLE_CPUS,
            Capability.STORE_WORKER,
            Capability.SAMPLESETS,
            Capability.DISK_USAGE,
            Capability.IMAGES,
        }
    )

    def __init__(self, settings: SlurmSettings, clock: Callable[[], float], wake: Callable[[], None]) -> None:
        self.settings = settings
        self._now = clock
        self._wake = wake
        self._jobs: dict[str, JobRecord] = {}
        self._lock = threading.Lock()
        self._addresses: dict[str, str] = {}
        self._last_nodes: tuple[NodeInfo, ...] = ()
        if settings.root is None:
            raise ValueError("SlurmSettings.root: the shared directory is not set (create() sets it)")
        self.root: Path = settings.root
        self.root.mkdir(parents=True, exist_ok=True)
        sweep_trash(self.root / "jobs")  # scratch an earlier server had not finished removing
        self._pythonpath = install_runtime_shim(self.root / "pythonpath")
        #: probed on this host at start (IsolationError: ``sandbox`` asked for and bwrap cannot run);
        #: the nodes need bubblewrap too (docs/security.md)
        self._sandbox, self.isolation = choose(
            settings.isolation, self._pythonpath, gpus=False, private=(self.root,)
        )
        #: job environments (one per distinct requirements.txt, or per image and requirements) on the
        #: shared directory, built on this host, in the sandbox where there is one (pip runs a
        #: source package's build code)
        self._envs = EnvCache(self.root / "envs", settings.env_cache_bytes, sandbox=self._sandbox)
        #: pulled and unpacked images on the shared directory (pulled once for every node), and
        #: the jobs' environments in them
        images = ImageStore(
            self.root / "images", frozenset(settings.insecure_registries), settings.image_cache_bytes
        )
        self._runtimes = ImageRuntimes(images, self._envs, confined=self._sandbox is not None)
        #: SampleSets: volume and admin mount here, node caches and mounts on the nodes (samplesets.py)
        self.samplesets = SlurmSampleSets(settings, self.root / "samplesets")
        #: a sandboxed job's workers get a network namespace per host (nodekeep.py), made on the
        #: nodes as root: asked for with --isolation sandbox; with auto where this host could
        self._scripts = BatchScripts(
            settings, self._pythonpath, self._sandbox, self.samplesets,
            network=self._sandbox is not None and (settings.isolation == "sandbox" or netns.probe() is None),
            addresses=lambda: self._addresses, fence_after=self._fence_after,
        )  # fmt: skip
        self._fence_s: int | None = settings.fence_after_s

    # -- contract -------------------------------------------------------------------------------

    def nodes(self) -> tuple[NodeInfo, ...]:
        """Nodes with their size and, as ``foreign`` (capability ``shared-capacity``), what Slurm has
        allocated there beyond what our running workers asked for (``capacity.snapshot``)."""
        try:
            found = sc.cluster_nodes(self.settings.command_timeout, self.settings.partition)
        except sc.SlurmCommandError as exc:  # Slurm busy or down: the last snapshot, no cycle lost
            log.warning("sinfo failed, using the last node snapshot: %s", exc)
            return self._last_nodes
        self._addresses.update({n.name: n.address for n in found})
        mine = self._requested_by_us()
        holders = self._foreign_holders() if any(n.alloc_cpus for n in found) else {}
        self._last_nodes = capacity.snapshot(found, mine, holders)
        return self._last_nodes

    def _foreign_holders(self) -> dict[str, list[str]]:
        """Per node, the running Slurm jobs that are not ours; {} when squeue fails (the wait
        reasons then say less)."""
        with self._lock:
            jobs_here = list(self._jobs.values())
        try:
            running = sc.running(self.settings.command_timeout)
        except sc.SlurmCommandError:
            return {}
        return capacity.foreign_holders(jobs_here, running)

    def start(self, launch: JobLaunch) -> None:
        jdir = self._job_dir(launch.key)
        if launch.attempt == 0:
            shutil.rmtree(jdir, ignore_errors=True)
        else:
            shutil.rmtree(jdir / "workers", ignore_errors=True)
        for sub in ("logs", "run", "workers", "contract"):
            (jdir / sub).mkdir(parents=True, exist_ok=True)
        try:
            make_dirs(launch.output_dir)  # never through a link a job planted in its home
        except (ConfinementError, OSError) as exc:
            log.warning("%s: output not created: %s", launch.key, exc)
        given = self._allocate_ports(len(launch.placement) + 2)
        workers = {}
        for p, port in zip(launch.placement, given, strict=False):
            runs = log_runs(jdir / "logs", f"{p.role}-{p.index}")
            # the store listens on the job's master port (``_topology``)
            at = given[-1] if p.role == RENDEZVOUS else port
            w = WorkerRecord(p.role, p.index, p.node, at, run=runs[-1] + 1 if runs else 0)
            workers[w.name] = w
        if launch.framework == "torch" and launch.trainer_range is not None and not launch.count(RENDEZVOUS):
            # an elastic torch job's store the plan did not place (a launch of an older server)
            runs = log_runs(jdir / "logs", f"{RENDEZVOUS}-0")
            node = self._store_node(launch)
            store = WorkerRecord(RENDEZVOUS, 0, node, given[-1], run=runs[-1] + 1 if runs else 0)
            workers[store.name] = store
        job = JobRecord(launch, jdir, workers, (given[-2], given[-1]))
        with self._lock:
            job.vni = self._free_vni(launch.key)
            self._jobs[launch.key] = job
        with job.lock:
            try:
                safe_extract(launch.package, jdir / "package")
            except (ArchiveError, OSError) as exc:
                self._fail(job, f"the job package could not be unpacked: {exc}", "StartFailed")
                return
            requirements = _requirements(jdir / "package")
            if not requirements and launch.image is None:
                self._begin(job)
                return
            job.stage = Stage.PREPARING
            doing = "pulling its image" if launch.image is not None else "building its environment"
            job.events.append(BackendEvent("Normal", "Preparing", f"{doing} (logs -w prepare)"))
            self._record(job)
        self._prepare_async(job, requirements)

    def _prepare_async(self, job: JobRecord, requirements: str) -> None:
        """Pull the job's image or build its environment in a thread of its own (``_begin`` at the
        end); started again for a job adopted at Preparing (its environment and image are made once,
        under their locks: what the last server finished is reused)."""
        threading.Thread(
            target=self._prepare, args=(job, requirements), name=f"prepare-{job.launch.key}"
        ).start()

    def _fence_after(self) -> int:
        """Seconds a kept run may be cut off before it ends itself: before Slurm counts its node
        down (half of ``SlurmdTimeout``, asked once), so its restart elsewhere never overlaps it."""
        if self._fence_s is None:
            try:
                timeout = sc.controller(self.settings.command_timeout).slurmd_timeout_s
            except sc.SlurmCommandError as exc:
                log.warning("no fencing of cut-off nodes' runs: %s", exc)
                return 0  # asked again at the next submission
            # 0: Slurm never counts a silent node down, so nothing restarts its runs elsewhere
            self._fence_s = max(timeout // 2, 5) if timeout > 0 else 0
            if not self._fence_s:
                log.info("no fencing of cut-off nodes' runs: SlurmdTimeout is 0 (nodes never count as down)")
        return self._fence_s

    def _store_node(self, launch: JobLaunch) -> str:
        return capacity.store_node(launch, self._last_nodes, self._requested_by_us())

    def _prepare(self, job: JobRecord, requirements: str) -> None:
        """Build the job's environment on the shared directory (the server's host runs pip): in its
        image when it has one, pulled there first (``local.image_prep``: once for every node)."""

        def say(event: BackendEvent) -> None:
            with job.lock:
                job.events.append(event)

        log_path = job.dir / "logs" / f"prepare.{len(log_runs(job.dir / 'logs', 'prepare'))}.log"
        made = None
        try:
            if job.launch.image is not None:
                made = self._runtimes.prepare(job.launch, requirements, log_path, say)
                env = made.venv
            else:
                env = self._envs.ensure(requirements, log_path, holder=job.launch.key)
        except ImageError as exc:
            with job.lock:
                self._fail(job, f"pulling {job.launch.image} failed: {exc}", str(exc.problem))
        except ImageUnusable as exc:
            with job.lock:
                self._fail(job, str(exc), "ImageUnusable")
        except (EnvBuildError, OSError) as exc:
            with job.lock:
                self._fail(job, f"building the environment failed: {exc}", "StartFailed")
        except Exception as exc:  # never leave a job Preparing forever: fail it with the cause
            log.exception("preparing %s failed", job.launch.key)
            with job.lock:
                self._fail(job, f"preparing the job failed: {type(exc).__name__}: {exc}", "StartFailed")
        else:
            with job.lock:
                if made is not None:
                    job.image_rootfs, job.image_python = str(made.image.rootfs), made.image.python
                    job.image_env = made.env
                job.env_dir = str(env)
                if job.stage == Stage.PREPARING:
                    ready = "image ready" if made is not None else "environment ready"
                    job.events.append(BackendEvent("Normal", "Prepared", ready))
                    self._begin(job)
                elif job.stage == Stage.DONE:  # stopped while it was prepared: no longer in use
                    self._runtimes.release(requirements, job.launch.key, job.image)
        self._wake()

    def _begin(self, job: JobRecord) -> None:
        """Submit the first workers: the pservers, or the trainers of a job without any."""
        jail = self._scripts.jail(job)
        try:
            if jail is not None:
                jail.check()  # every place the workers will see can be bound (and the home exists)
        except (ConfinementError, OSError) as exc:
            self._fail(job, f"the job's files cannot be confined: {exc}", "StartFailed")
            return
        # prepared (here or in ``_prepare``), whatever stage the record was made with
        step = next_step(Stage.PREPARING, self._seen(job), prepared=True)
        job.stage = stage_after(step, Stage.PREPARING)
        self._submit(job, job.servers() if step == Step.START_SERVERS else job.role("trainer"))
        self._record(job)

    def adopt(self, launch: JobLaunch) -> None:
        jdir = self._job_dir(launch.key)
        try:
            job = read_record(launch, jdir)
        except (OSError, ValueError, KeyError, TypeError):
            self.start(launch)  # never got as far as recording it: start afresh
            return
        job.events.append(
            BackendEvent(
                "Normal", "Adopted", f"re-adopted {len(job.workers)} workers' Slurm jobs after a restart"
            )
        )
        with self._lock:
            if not job.vni or any(j.vni == job.vni for j in self._jobs.values()):  # an older record
                job.vni = self._free_vni(launch.key)
            self._jobs[launch.key] = job
        if job.stage == Stage.PREPARING:  # the last server stopped while it prepared the job
            self._prepare_async(job, _requirements(jdir / "package"))

    def sync(self, key: str) -> JobStatus:
        job = self._get(key)
        if job is None:
            return JobStatus(failure="the backend has no record of this job", finished=True)
        with job.lock:
            self._advance(job)
            events, job.events = tuple(job.events), []
            return JobStatus(
                workers=tuple(self._status(job, w) for w in [*job.workers.values(), *job.retired.values()]),
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
            for w in job.workers.values():
                w.restart_at = None
                if w.state not in ENDED_WORKER_STATES:
                    w.stopped = True
            job.stage = Stage.STOPPING
        self._cancel(job, [*job.workers.values(), *job.retired.values()], grace)
        with job.lock:
            self._refresh(job)
            self._done(job)
            self._record(job)

    def add_trainer(self, key: str, placement: WorkerPlacement) -> None:
        job = self._get(key)
        if placement.role != "trainer":
            raise NotSupported(self.name, f"adding a {placement.role} to a running job")
        if job is None:
            raise JobRejected(f"cannot add trainer-{placement.index} to {key}: no such job here")
        with job.lock:
            if job.stage in (Stage.STOPPING, Stage.DONE):
                return  # the job is ending: nothing to grow
            old = job.retired.pop(f"trainer-{placement.index}", None)
            (port,) = self._allocate_ports(1)
            w = WorkerRecord("trainer", placement.index, placement.node, port, run=old.run + 1 if old else 0)
            job.workers[w.name] = w
            job.events.append(BackendEvent("Normal", "TrainerAdded", f"{w.name} added on {placement.node}"))
            if job.stage == Stage.TRAINERS:
                self._submit(job, [w])  # every trainer gets the new membership too
            else:
                self._publish_membership(job, self._topology(job))
            self._record(job)

    def remove_trainer(self, key: str, grace: float) -> None:
        job = self._get(key)
        if job is None:
            return
        with job.lock:
            trainers = job.role("trainer")
            if len(trainers) <= 1 or job.stage in (Stage.STOPPING, Stage.DONE):
                return  # never below one trainer; an ending job is stopped whole
            w = trainers[-1]
            del job.workers[w.name]
            job.retired[w.name] = w
            w.stopped, w.restart_at = True, None
            self._publish_membership(job, self._topology(job))
            job.events.append(BackendEvent("Normal", "TrainerRemoved", f"{w.name} retired (graceful stop)"))
            self._record(job)

        def run() -> None:
            self._cancel(job, [w], grace)
            self._wake()

        threading.Thread(target=run, name=f"retire-{key}-{w.name}", daemon=True).start()

    def read_log(self, req: LogRequest) -> Iterator[bytes]:
        def ended(worker: str) -> bool:
            job = self._get(req.key)
            if job is None:
                return True
            with job.lock:
                w = job.workers.get(worker) or job.retired.get(worker)
                if w is None or job.stage == Stage.DONE:
                    return True
                if w.state in ENDED_WORKER_STATES:
                    return w.restart_at is None
                # between two syncs: the run's launcher has written its exit status
                return status_file(job, w).exists()

        return read_logs(self._job_dir(req.key) / "logs", req, ended)

    def disk_usage(self, key: str) -> Iterator[int]:
        return walk_bytes(self._job_dir(key))

    def forget(self, key: str) -> None:
        with self._lock:
            job = self._jobs.pop(key, None)
        self._release_env(self._job_dir(key), key, job)
        shutil.rmtree(self._job_dir(key), ignore_errors=True)

    def _release_env(self, jdir: Path, key: str, job: JobRecord | None) -> None:
        """The job's environment (on the host's Python, or in its image) no longer used by it."""
        self._runtimes.release(_requirements(jdir / "package"), key, job.image if job is not None else None)

    def confinement(self) -> Confinement:
        if self.isolation.sandboxed:
            return Confinement(
                f"{self.isolation}; made on each worker's Slurm node, which needs bubblewrap and "
                "unprivileged user namespaces too", True
            )  # fmt: skip
        return Confinement(
            f"{self.isolation}: Slurm workers run unsandboxed as the server's Unix user and can read "
            "what it reads on their node (docs/security.md)",
            False,
        )

    def close(self) -> None:
        """Unmount the SampleSets' admin mounts (the controller's ensure mounts them again); the
        Slurm jobs keep running without the server, their own mounts with them."""
        self.samplesets.close()

    # -- the start sequence ---------------------------------------------------------------------

    def _advance(self, job: JobRecord) -> None:
        if job.stage == Stage.DONE:
            return
        try:
            self._refresh(job)
        except sc.SlurmCommandError as exc:  # Slurm is busy or down: try again in the next sync
            job.events.append(BackendEvent("Warning", "SlurmUnavailable", str(exc)))
            return
        now = self._now()
        if job.stage in (Stage.PSERVERS, Stage.TRAINERS):
            for w in list(job.workers.values()):
                if w.role in SERVER_ROLES and w.state == WorkerState.SUCCEEDED:
                    self._fail(job, f"{w.name} exited before the trainers finished")
                elif w.why == WorkerReason.PORT_HELD and w.restart_at is None and self._move_port(job, w):
                    pass
                elif w.state in (WorkerState.FAILED, WorkerState.LOST) and w.restart_at is None:
                    self._restart_or_fail(job, w, now)
                if job.failure:
                    return
            due = [w for w in job.workers.values() if w.restart_at is not None and w.restart_at <= now]
            if due:
                for w in due:
                    w.restart_at = None
                    w.node = ""  # Slurm chooses: its node may be down
                self._submit(job, due)
        step = next_step(job.stage, self._seen(job))
        if step == Step.START_TRAINERS:
            names = ", ".join(w.name for w in job.servers())
            job.events.append(BackendEvent("Normal", "ServersReady", f"{names} run and listen"))
            job.stage = stage_after(step, job.stage)
            self._submit(job, job.role("trainer"))
        elif step == Step.STOP_SERVERS:
            job.stage = stage_after(step, job.stage)
            for w in job.servers():
                w.stopped = True
            self._cancel_async(job, job.servers())
        if job.stage == Stage.STOPPING and all(
            w.state in ENDED_WORKER_STATES or w.slurm_id is None for w in job.workers.values()
        ):
            self._done(job)
        self._record(job)

    def _done(self, job: JobRecord) -> None:
        """Every Slurm job of ``job`` has ended: its environment is released and its scratch
        dropped (retention, docs/pfs.md); logs, statuses and the record stay until ``forget``. Its
        workers' monitors removed its namespace on each host; one killed first (a cancelled run)
        left it: the one on this host, if any, goes now (the others are collected by the next run
        on their host: ``nodekeep.py``)."""
        if job.stage == Stage.DONE:
            return
        job.stage = Stage.DONE
        self._release_env(job.dir, job.launch.key, job)
        drop_scratch(job.dir)
        name = self._scripts.netns(job)
        if name and netns.exists(name):  # its processes may still be ending: wait for them aside
            threading.Thread(
                target=netns.remove_when_unused, args=(name,), name=f"netns-{name}", daemon=True
            ).start()

    def _seen(self, job: JobRecord) -> list[Seen]:
        """The workers as the start sequence sees them (``backends.start_sequence``); whether a
        server listens is asked only while the servers start."""
        ask = job.stage == Stage.PSERVERS
        return [
            Seen(w.name, w.role, w.state, ask and w.role in SERVER_ROLES and self._listens(job, w))
            for w in job.workers.values()
        ]

    def _listens(self, job: JobRecord, w: WorkerRecord) -> bool:
        """A server runs and listens: its monitor's mark (the server cannot connect into the job's
        namespace), or, unsandboxed, its launcher's word that the port was free on the node and a
        connection to it (without that word, a squatter's listener would pass)."""
        if w.state != WorkerState.RUNNING:
            return False
        if self._scripts.kept:
            return ready_file(job, w).exists()
        return port_free_file(job, w).exists() and ports.listening(self._host(w), w.port)

    def _free_vni(self, key: str) -> int:
        """A VXLAN id for job ``key`` that no live job of this server has (the caller holds
        ``_lock``): from a hash of the server's root and the job, so that a job just ended (whose
        links may linger on a node whose monitors were killed) and another server's jobs on the
        same cluster are unlikely to have it."""
        used = {j.vni for j in self._jobs.values() if j.stage != Stage.DONE}
        span = _LAST_VNI - _FIRST_VNI + 1
        first = int(hashlib.sha256(f"{self.root}\0{key}".encode()).hexdigest()[:8], 16) % span
        candidates = (_FIRST_VNI + (first + i) % span for i in range(span))
        return next(v for v in candidates if v not in used)

    def _restart_or_fail(self, job: JobRecord, w: WorkerRecord, now: float) -> None:
        ran = (w.finished_at - w.started_at) if w.finished_at and w.started_at else None
        ended = Exit(code=w.exit_code, ran_s=ran)
        lost = f" ({w.reason})" if w.reason else ""
        verdict = decide(
            job.launch.restarts.policy(w.role), job.launch.restarts, w.name + lost, ended,
            job.job_restarts, w.run, w.restarts,
        )  # fmt: skip
        if isinstance(verdict, Restart):
            job.job_restarts += 1
            w.restarts = verdict.streak
            w.restart_at = now + verdict.delay_s
            job.events.append(BackendEvent("Warning", "WorkerRestarting", verdict.message))
            self._wake()
        else:
            self._fail(job, verdict.message)

    def _move_port(self, job: JobRecord, w: WorkerRecord) -> bool:
        """A server whose port another process holds on its node (``PortHeld``) is submitted again at
        another port, on the same node, without counting a restart (False: its restart policy
        decides instead). Only before the trainers start, whose endpoints name the port; at most
        ``_PORT_MOVES`` times per job (a node that holds the whole range)."""
        if job.stage != Stage.PSERVERS or w.state != WorkerState.FAILED or len(job.held_ports) >= _PORT_MOVES:
            return False
        job.held_ports.add(w.port)
        try:
            (port,) = self._allocate_ports(1)
        except JobRejected:
            return False
        old, w.port = w.port, port
        if w.role == RENDEZVOUS:  # the store listens on the job's master port (``_topology``)
            job.stores = (job.stores[0], port)
        where = w.ran_on or w.node
        job.events.append(BackendEvent(
            "Warning", "PortMoved",
            f"{w.name}: port {old} is held on {where} by a process outside the platform; moved to "
            f"port {port} (nodes must keep up --slurm-ports free for workers)",
        ))  # fmt: skip
        w.node = where  # its planned node: the port, not the node, was in the way
        self._submit(job, [w])
        return True

    def _fail(self, job: JobRecord, message: str, reason: str = "WorkerFailed") -> None:
        if job.failure is None:
            job.failure, job.failure_reason = message, reason
            job.events.append(BackendEvent("Warning", reason, message))
        job.stage = Stage.STOPPING
        live = [w for w in job.workers.values() if w.state not in ENDED_WORKER_STATES]
        for w in live:
            w.stopped = True
            w.restart_at = None
        self._cancel_async(job, live)

    # -- Slurm ----------------------------------------------------------------------------------

    def _submit(self, job: JobRecord, workers: list[WorkerRecord]) -> None:
        """sbatch each worker; one that Slurm refuses fails the job (``StartFailed``)."""
        topology = self._topology(job)
        self._publish_membership(job, topology)
        for w in workers:
            if w.slurm_id is not None and w.state not in ENDED_WORKER_STATES:
                continue
            if w.slurm_id is not None:  # a restart: its next run
                w.run += 1
            argv, env = self._scripts.sbatch(job, w, topology)
            try:
                w.slurm_id = sc.submit(argv, env, self.settings.command_timeout)
            except sc.SlurmCommandError as exc:
                self._fail(job, f"Slurm refused {w.name}: {exc}", "StartFailed")
                return
            w.state, w.exit_code, w.started_at, w.finished_at, w.stopped = (
                WorkerState.PENDING,
                None,
                None,
                None,
                False,
            )
            w.why = w.message = ""
            job.events.append(BackendEvent("Normal", "Submitted", f"{w.name} is Slurm job {w.slurm_id}"))
        self._record(job)

    def _refresh(self, job: JobRecord) -> None:
        """Every worker's state from one ``squeue --json`` and the launchers' status files."""
        everyone = [*job.workers.values(), *job.retired.values()]
        ids = [w.slurm_id for w in everyone if w.slurm_id is not None]
        queued = sc.queue(ids, self.settings.command_timeout)
        now = self._now()
        for w in everyone:
            if w.slurm_id is None or (w.state in ENDED_WORKER_STATES and w.slurm_id not in queued):
                continue
            sj = queued.get(w.slurm_id)
            status = endings.exit_status(job, w)
            if sj is not None and sj.state == "PENDING":
                if w.reason != sj.reason and sj.reason not in ("", "None"):  # None: not yet looked at
                    w.reason = sj.reason
                    job.events.append(BackendEvent("Normal", "Pending", self._why_pending(w, sj.reason)))
                continue
            if sj is not None and sj.nodes:
                w.ran_on = sj.nodes
            # a run is over once Slurm has ended its job, not when its status file appears: the
            # launcher writes that first, then Slurm empties the job's cgroup, frees what it held
            # and only then says OUT_OF_MEMORY (the reason) or COMPLETED
            if sj is not None and sj.state in ("RUNNING", "COMPLETING", "CONFIGURING"):
                if w.state != WorkerState.RUNNING:
                    w.state, w.started_at, w.reason = WorkerState.RUNNING, now, ""
                continue
            endings.record_end(job, w, sj, status, now)

    def _why_pending(self, w: WorkerRecord, reason: str) -> str:
        """``trainer-1 waits for n2 (Slurm: Resources); n2 is held by bob's job 12 (big, 4 CPUs)``."""
        where = f" for {w.node}" if w.node else ""
        text = f"{w.name} waits{where} (Slurm: {reason})"
        if w.node and reason in ("Resources", "Priority", "ReqNodeNotAvail"):
            try:
                held = sc.holders(w.node, self.settings.command_timeout)
            except sc.SlurmCommandError:
                held = []
            if held:
                text += f"; {w.node} is held by {', '.join(held)}"
        return text

    def _cancel(self, job: JobRecord, workers: list[WorkerRecord], grace: float) -> None:
        """SIGTERM to every process of the workers' Slurm jobs, ``grace`` seconds, then scancel
        (Slurm's SIGKILL after KillWait); waits until Slurm reports them all ended (bounded)."""
        ids = [w.slurm_id for w in workers if w.slurm_id is not None]
        t = self.settings.command_timeout
        try:
            sc.cancel(ids, t, signal="TERM")
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and not self._all_ended(ids):
                time.sleep(0.2)
            sc.cancel(ids, t)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not self._all_ended(ids):
                time.sleep(0.5)
        except sc.SlurmCommandError as exc:
            log.warning("%s: cancelling its Slurm jobs: %s", job.launch.key, exc)

    def _cancel_async(self, job: JobRecord, workers: list[WorkerRecord]) -> None:
        def run() -> None:
            self._cancel(job, workers, self.settings.cleanup_grace)
            self._wake()

        threading.Thread(target=run, name=f"scancel-{job.launch.key}", daemon=True).start()

    def _all_ended(self, ids: list[int]) -> bool:
        queued = sc.queue(ids, self.settings.command_timeout)
        return all(j.ended for j in queued.values())

    # -- endpoints, records ---------------------------------------------------------------------

    def _host(self, w: WorkerRecord) -> str:
        node = w.ran_on or w.node
        if node and node not in self._addresses:
            self._addresses.update(
                {n.name: n.address for n in sc.cluster_nodes(self.settings.command_timeout)}
            )
        return self._addresses.get(node, node)

    def _topology(self, job: JobRecord) -> Topology:
        def eps(role: str) -> list[str]:
            return [f"{self._host(w)}:{w.port}" for w in job.role(role)]

        ps, tr = eps("pserver"), eps("trainer")
        gloo_host = ps[0].rpartition(":")[0] if ps else "127.0.0.1"
        master = job.role(RENDEZVOUS) or job.role("trainer")  # the store, or trainer 0 (torchrun's)
        master_host = self._host(master[0]) if master else "127.0.0.1"
        return Topology(ps, tr, f"{gloo_host}:{job.stores[0]}", f"{master_host}:{job.stores[1]}")

    @staticmethod
    def _publish_membership(job: JobRecord, t: Topology) -> None:
        m = membership.Membership(
            version=membership.now_version(), trainers=len(t.trainer_endpoints),
            trainer_endpoints=tuple(t.trainer_endpoints), pserver_endpoints=tuple(t.pserver_endpoints),
        )  # fmt: skip
        try:
            membership.write(str(job.dir / "contract" / "membership.json"), m)
        except OSError as exc:
            log.warning("publishing the membership of %s failed: %s", job.launch.key, exc)

    @staticmethod
    def _record(job: JobRecord) -> None:
        write_record(job)

    def _status(self, job: JobRecord, w: WorkerRecord) -> WorkerStatus:
        return WorkerStatus(
            name=w.name, role=w.role, index=w.index, state=w.state, node=w.ran_on or w.node,
            endpoint=f"{self._host(w)}:{w.port}", restarts=w.run, exit_code=w.exit_code,
            started_at=w.started_at, finished_at=w.finished_at,
            log_path=str(log_file(job, w)),
            reason=WorkerReason(w.why), message=w.message,
        )  # fmt: skip

    def _requested_by_us(self) -> dict[str, Resources]:
        with self._lock:
            jobs = list(self._jobs.values())
        return capacity.requested_by_us(jobs)

    def _allocate_ports(self, n: int) -> list[int]:
        """``n`` ports of the range that no live job of ours uses (``ports.allocate``)."""
        with self._lock:
            jobs = list(self._jobs.values())
        return ports.allocate(jobs, self.settings.ports, n)

    def _get(self, key: str) -> JobRecord | None:
        with self._lock:
            return self._jobs.get(key)

    def _job_dir(self, key: str) -> Path:
        user, _, name = key.partition("/")
        return self.root / "jobs" / user / name


def _requirements(package: Path) -> str:
    """The package's requirements.txt when it lists anything, else ""."""
    try:
        text = (package / "requirements.txt").read_text()
    except OSError:
        return ""
    return text if any(ln.strip() and not ln.strip().startswith("#") for ln in text.splitlines()) else ""


def create(setup: BackendSetup) -> SlurmBackend:
    """The registry's factory: a Slurm backend from :class:`SlurmSettings`, its files under
    ``<data>/slurm`` unless the settings name another shared directory (``backends.registry``),
    once the nodes are seen to see that directory (``probe``: ``BackendConfigError`` otherwise)."""
    settings: SlurmSettings = setup.settings
    if settings.root is None:
        settings = dataclasses.replace(settings, root=setup.data_dir / "slurm")
    probe.check_shared_dir(settings)
    return SlurmBackend(settings, setup.now, setup.wake)
