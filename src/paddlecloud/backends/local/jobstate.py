"""What the local backend keeps: its settings (:class:`LocalConfig`) and, per job, its workers'
processes, ports, restart book, stage and what preparing it made (:class:`LocalJob`); and what of
that ``launch.json`` records for a server that adopts the job (``image_record``)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from paddlecloud.backends.base import BackendEvent, JobLaunch
from paddlecloud.backends.local.isolation import RunLimits
from paddlecloud.backends.local.nodes import NodeShape
from paddlecloud.backends.local.process import WorkerProc
from paddlecloud.backends.local.restarts import RestartBook
from paddlecloud.backends.local.sandbox import ImageRoot
from paddlecloud.backends.start_sequence import SERVER_ROLES, Stage
from paddlecloud.core.envcontract import Topology

__all__ = ["LocalConfig", "LocalJob", "image_record"]


@dataclass(frozen=True)
class LocalConfig:
    root: Path
    nodes: NodeShape = field(default_factory=NodeShape)
    #: Grace period used when the backend itself stops workers (pservers after success, after a failure).
    cleanup_grace: float = 5.0
    #: auto | sandbox | none: confine each worker to its job's files (``sandbox.py``; auto: where
    #: bubblewrap works)
    isolation: str = "auto"
    #: names of server environment variables workers get besides the defaults (``sandbox.PASS_ENV``)
    pass_env: tuple[str, ...] = ()
    #: what no job may see (the data dir): refused if the sandbox's read-only system would show it
    private: tuple[Path, ...] = ()
    #: cap of the environment cache (``envs.py``: least recently used, unused ones evicted); None: none
    env_cache_bytes: int | None = None
    #: what every run gets besides its --memory and --cpu: the pids limit, the log cap
    limits: RunLimits = field(default_factory=RunLimits)
    #: the cgroup runs' cgroups go in (``up --cgroup-root``; None: ``paddlecloud`` under the server's)
    cgroup_root: str | None = None
    #: registries pulled from over plain HTTP (``up --insecure-registry``; loopback ones always are)
    insecure_registries: tuple[str, ...] = ()
    #: cap of the unpacked images (``images.py``: least recently used, unused ones evicted); None: none
    image_cache_bytes: int | None = None


@dataclass
class LocalJob:
    launch: JobLaunch
    dir: Path
    topology: Topology
    workers: dict[str, WorkerProc]
    ports: list[int]
    book: RestartBook
    stage: Stage = Stage.PREPARING
    env_dir: Path | None = None
    #: the unpacked image the workers run in, and its Env (``image_prep``); None: the host's system
    image: ImageRoot | None = None
    image_env: tuple[str, ...] = ()
    failure: str | None = None
    failure_reason: str = "WorkerFailed"
    events: list[BackendEvent] = field(default_factory=list)
    #: trainers removed by a shrink (stopping or stopped), reported as Stopped
    retired: dict[str, WorkerProc] = field(default_factory=dict)
    #: the version of the membership last published (``runtime.membership``)
    membership_version: int = 0
    lock: threading.RLock = field(default_factory=threading.RLock)
    stopper: threading.Thread | None = None
    prepared: threading.Event = field(default_factory=threading.Event)
    #: node -> the mount of the job's SampleSet there (read-only at PADDLECLOUD_SAMPLESET_DIR)
    sampleset_mounts: dict[str, Path] = field(default_factory=dict)
    #: signs the job's torch rendezvous state (``runtime.torchelastic``): chosen at the start, kept
    #: in launch.json so that trainers started after a server restart get the same one
    rendezvous_key: str = field(default="", repr=False)

    def role(self, role: str) -> list[WorkerProc]:
        return [w for w in self.workers.values() if w.role == role]

    def servers(self) -> list[WorkerProc]:
        """What must listen before trainers start and is stopped after them: pservers, and the
        rendezvous store of an elastic torch job."""
        return [w for w in self.workers.values() if w.role in SERVER_ROLES]

    def worker_ports(self) -> dict[str, int]:
        return {name: w.port for name, w in self.workers.items()}


def image_record(job: LocalJob) -> dict[str, object] | None:
    """What ``launch.json`` keeps of the job's image (``adopt`` reads it back)."""
    if job.image is None:
        return None
    return {"rootfs": str(job.image.rootfs), "python": job.image.python, "env": list(job.image_env)}
