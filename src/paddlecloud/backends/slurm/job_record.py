"""The Slurm backend's record of each job: its workers' runs, Slurm job ids, ports and stage.

    SlurmBackend ──JobRecord / WorkerRecord (in memory, under the job's lock)──▶ write_record ──▶ record.json
    a new server ──read_record(record.json)──▶ JobRecord again (``adopt``), then ``squeue`` says the rest

``record.json`` lives in the job's directory on the shared filesystem and is rewritten atomically
after every change of a worker's run or state, so a server killed at any moment is followed by one
that knows every Slurm job it started. It also keeps the job's rendezvous key (elastic torch:
``PADDLECLOUD_RDZV_KEY``, the same for every run of every trainer): the job's directory is the
server's, and a sandboxed worker sees only its ``contract/`` of it.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from paddlecloud.backends.base import BackendEvent, JobLaunch
from paddlecloud.backends.local.sandbox import ImageRoot
from paddlecloud.backends.start_sequence import SERVER_ROLES, Stage
from paddlecloud.core.envcontract import new_rendezvous_key
from paddlecloud.core.phases import WorkerState
from paddlecloud.runtime.launcher import write_json_atomic

__all__ = [
    "JobRecord",
    "WorkerRecord",
    "read_record",
    "slug",
    "write_record",
]


@dataclass
class WorkerRecord:
    role: str
    index: int
    node: str  # planned node ("" : Slurm chooses, a restart)
    port: int
    run: int = 0
    slurm_id: int | None = None
    state: WorkerState = WorkerState.PENDING
    ran_on: str = ""  # the node Slurm ran it on
    exit_code: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    restarts: int = 0
    stopped: bool = False  # stopped by the platform
    restart_at: float | None = None  # a restart is due then
    reason: str = ""  # Slurm's pending reason, or how the run ended
    #: why the run ended as it did beyond its exit code (``core.phases.WorkerReason``: "OOMKilled")
    #: and the details (the limit); "" while it runs and for a plain exit
    why: str = ""
    message: str = ""

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"


@dataclass
class JobRecord:
    launch: JobLaunch
    dir: Path
    workers: dict[str, WorkerRecord]
    stores: tuple[int, int]  # gloo and master store ports
    stage: Stage = Stage.PSERVERS
    failure: str | None = None
    failure_reason: str = "WorkerFailed"
    job_restarts: int = 0
    #: the environment built from the package's requirements.txt ("" : none, the server's Python);
    #: with an image, the venv its Python made there (``local.envs``)
    env_dir: str = ""
    #: the unpacked image the workers run in, on the shared directory ("": none), the python3 in
    #: it that runs the launcher, and the image's Env (``backends.images``)
    image_rootfs: str = ""
    image_python: str = ""
    image_env: tuple[str, ...] = ()
    #: trainers removed by a shrink (stopping or stopped), reported as Stopped
    retired: dict[str, WorkerRecord] = field(default_factory=dict)
    events: list[BackendEvent] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock)
    #: signs the job's torch rendezvous state (``PADDLECLOUD_RDZV_KEY``): one per job, recorded so
    #: that runs submitted after a server restart get the same one
    rendezvous_key: str = field(default_factory=new_rendezvous_key, repr=False)
    #: the VNI of the job's VXLAN between its hosts (unique among the server's live jobs; 0: none)
    vni: int = 0
    #: ports a server of this job found held on its node (``PortHeld``): never given to it again
    held_ports: set[int] = field(default_factory=set)

    @property
    def image(self) -> ImageRoot | None:
        """The unpacked image the workers run in (None: the node's own system)."""
        return ImageRoot(Path(self.image_rootfs), self.image_python) if self.image_rootfs else None

    def role(self, role: str) -> list[WorkerRecord]:
        return sorted((w for w in self.workers.values() if w.role == role), key=lambda w: w.index)

    def servers(self) -> list[WorkerRecord]:
        return [w for role in SERVER_ROLES for w in self.role(role)]


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def write_record(job: JobRecord) -> None:
    """``record.json`` of ``job``, replaced atomically."""
    data = {
        "stage": job.stage,
        "stores": job.stores,
        "job_restarts": job.job_restarts,
        "workers": {name: dataclasses.asdict(w) for name, w in job.workers.items()},
        "retired": {name: dataclasses.asdict(w) for name, w in job.retired.items()},
        "env_dir": job.env_dir,
        "image": {"rootfs": job.image_rootfs, "python": job.image_python, "env": list(job.image_env)},
        "rendezvous_key": job.rendezvous_key,
        "vni": job.vni,
    }
    write_json_atomic(str(job.dir / "record.json"), data)


def read_record(launch: JobLaunch, jdir: Path) -> JobRecord:
    """The job recorded in ``jdir`` (OSError, ValueError, KeyError, TypeError when it cannot be)."""
    rec = json.loads((jdir / "record.json").read_text())
    workers = {name: WorkerRecord(**w) for name, w in rec["workers"].items()}
    retired = {name: WorkerRecord(**w) for name, w in rec.get("retired", {}).items()}
    for w in [*workers.values(), *retired.values()]:
        w.state = WorkerState(w.state)
    job = JobRecord(launch, jdir, workers, tuple(rec["stores"]), Stage(rec["stage"]), retired=retired)
    job.job_restarts = int(rec.get("job_restarts", 0))
    job.env_dir = str(rec.get("env_dir", ""))
    image = rec.get("image") or {}
    job.image_rootfs, job.image_python = str(image.get("rootfs") or ""), str(image.get("python") or "")
    job.image_env = tuple(str(e) for e in image.get("env") or ())
    job.rendezvous_key = str(rec.get("rendezvous_key") or "") or job.rendezvous_key  # recorded earlier
    job.vni = int(rec.get("vni") or 0)
    return job
