"""The backend contract: how the controller turns an admitted job into running workers.

    controller ──start(JobLaunch)──▶ backend      prepare package + environment, start pservers,
               ──sync(key)────────▶ backend      then trainers once every pserver listens;
               ◀──JobStatus──────── backend      report worker states and new events
               ──stop(key, grace)─▶ backend      SIGTERM, grace, SIGKILL: nothing left running

A backend owns endpoints (ports or pod addresses) and the start order; the controller owns phases,
scheduling and the database. Backends are found by name in ``backends.registry`` (an entry: its
settings dataclass, a lazily imported factory taking a :class:`BackendSetup`); the controller never
names one.

Trouble. What goes wrong with one job's workers is reported in its status (``failure``,
``failure_reason``: a worker that cannot be started is ``StartFailed``) and a passing condition as
an event. A call that cannot be done raises a ``backends.errors.BackendError`` of the kind that says
what the controller should do: ``BackendUnavailable`` (transient: the job is kept and the call tried
again next cycle, bounded), ``JobRejected`` (the job fails with the engine's message),
``NotSupported`` (outside the backend's capabilities). Anything else raised fails that job alone,
never the reconcile cycle.

Capabilities. Every backend declares its :class:`Capability` set; the controller calls an optional
operation only when it is declared (``adopt``, ``add_trainer``/``remove_trainer``, ``read_log``
with ``previous`` or ``follow``), and a backend raises ``NotSupported`` for one it did not declare.
``shared-capacity``: ``nodes()`` reports other work's load (``NodeInfo.foreign``). ``disk-usage``:
``disk_usage(key)`` measures a job's own folders (they count in its owner's storage quota), and a
job's scratch is removed once it ends (``backends.jobdirs``).
``fetch-package``: workers fetch the package with ``JobLaunch.package_url`` and the job token, since
``JobLaunch.package`` is a path on the server's machine. Endpoints are known before start, or, where
the engine chooses hosts, resolved by the workers at run time (``Topology.at_run_time`` and
``WorkerContext.endpoints_dir`` in ``core.envcontract``; ``runtime.endpoints``).

Implementations: ``backends.local`` (OS processes on virtual nodes of this machine),
``backends.slurm`` (a batch job per worker on a Slurm cluster; docs/slurm.md),
``backends.kubernetes`` (a TrainingJob custom resource per job, made into Pods by an operator;
docs/kubernetes.md) and ``backends.memory`` (workers a test drives, no processes). Every one passes
``tests/conformance``. docs/architecture.md, "The backend contract", has the whole contract.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol

from paddlecloud.api.adaptive import BatchSpec
from paddlecloud.backends.images import RegistryAuth
from paddlecloud.backends.samplesets import SampleSetRef
from paddlecloud.core.envcontract import ApiAccess, JobFiles
from paddlecloud.core.phases import WorkerReason, WorkerState
from paddlecloud.core.resources import Resources
from paddlecloud.core.restarts import RestartRules
from paddlecloud.scheduler import WorkerPlacement

__all__ = [
    "RENDEZVOUS",
    "STORE_NEED",
    "Backend",
    "BackendEvent",
    "BackendSetup",
    "Capability",
    "Confinement",
    "JobLaunch",
    "JobStatus",
    "LogRequest",
    "NodeInfo",
    "WorkerStatus",
]


class Capability(StrEnum):
    GPU = "gpu"  # assigns GPUs to trainers
    RESIZE = "resize"  # add_trainer / remove_trainer on a running job
    ADOPT = "adopt"  # running jobs survive a server restart
    LOGS_PREVIOUS = "logs-previous"  # keeps the logs of earlier runs of a worker
    LOGS_FOLLOW = "logs-follow"
    #: the nodes are all there is (no autoscaling): a job no node could ever hold is refused at submit
    #: unless its spec says ``queue_anyway``
    FIXED_CAPACITY = "fixed-capacity"
    #: the engine is shared with work that is not this platform's (other users of a Slurm cluster):
    #: ``nodes()`` reports what that work holds on each node (``NodeInfo.foreign``), and the
    #: controller's snapshot counts it as allocated besides its own placements
    SHARED_CAPACITY = "shared-capacity"
    #: the workers fetch the job package themselves, over the platform's API with the job's token
    #: (``JobLaunch.package_url``; ``python -m paddlecloud.runtime.bootstrap fetch``), because
    #: ``JobLaunch.package`` (a path on the server's machine) is not readable where they run. The
    #: platform then needs an ``api_url`` the workers reach (``up --api-url``)
    FETCH_PACKAGE = "fetch-package"
    #: SampleSets (data sets cached on the nodes, ``backends.samplesets``): the backend has a
    #: ``samplesets`` attribute (a ``SampleSetBackend``) and binds ``JobLaunch.sampleset``
    SAMPLESETS = "samplesets"
    #: ``disk_usage`` measures what each job's own folders hold on the engine's disks (the
    #: workers' copies of the package, their /tmp, logs): it counts in the owner's storage use
    DISK_USAGE = "disk-usage"
    #: the engine allocates each worker whole CPUs (Slurm's ``--cpus-per-task``: a ``500m`` worker
    #: holds one CPU): the controller plans and counts every worker at its CPU rounded up, so that
    #: what it plans onto a node is what the engine will allocate there
    WHOLE_CPUS = "whole-cpus"
    #: an elastic torch job's rendezvous store runs as a worker the engine allocates (Slurm: a job
    #: of its own, a whole CPU): the controller plans and counts it as the job's one pserver-shaped
    #: worker of ``STORE_NEED`` and the launch names that placement ``RENDEZVOUS`` (index 0), so the
    #: store starts where the plan left room for it (issue 25: it took a trainer's CPU)
    STORE_WORKER = "store-worker"
    #: every worker runs in the job's container image (``JobLaunch.image``); without it, a job that
    #: names an image is refused at submit (``images_unavailable``)
    IMAGES = "images"


#: the role of an elastic torch job's rendezvous store (``Capability.STORE_WORKER``)
RENDEZVOUS = "rendezvous"
#: what a rendezvous store is planned and allocated at (``Capability.STORE_WORKER``)
STORE_NEED = Resources(cpu_m=1000, memory=512 * 2**20)


@dataclass(frozen=True)
class BackendSetup:
    """What a backend is made from: its own settings plus what every backend may need."""

    settings: Any
    #: the platform's data dir (database, PFS under ``pfs/``, the backends' files under ``cluster/``)
    data_dir: Path
    #: this datacenter's name (PFS paths are /pfs/<datacenter>/...)
    datacenter: str = "local"
    #: the platform's clock (seconds)
    now: Callable[[], float] = field(default=lambda: 0.0)
    #: wake the reconcile loop early (something worth a cycle happened)
    wake: Callable[[], None] = field(default=lambda: None)

    @property
    def cluster_dir(self) -> Path:
        """Where a backend keeps its own files (job directories, logs, environments)."""
        return self.data_dir / "cluster"


@dataclass(frozen=True)
class Confinement:
    """What a backend's jobs are confined to, in words ``up`` prints, and whether at all (``up``
    warns loudly when they are not: a job then sees what the server's user sees)."""

    description: str
    confined: bool


@dataclass(frozen=True)
class NodeInfo:
    name: str
    #: what the node has for jobs (a node that takes no work now, down or drained: leave it out, or
    #: report it with its ``note``)
    capacity: Resources
    gpus: tuple[int, ...] = ()
    #: ``SHARED_CAPACITY`` backends: what work that is not this platform's holds here now (never
    #: this platform's own workers: the controller counts those from its placements)
    foreign: Resources = field(default_factory=Resources)
    #: ... and the GPU indices it holds
    foreign_gpus: tuple[int, ...] = ()
    #: what the engine says about the node, for a waiting job's reason ("drained: disk"); "" none
    note: str = ""


@dataclass(frozen=True)
class JobLaunch:
    """Everything a backend needs to run one admitted job."""

    key: str  # "user/name", unique among live jobs
    user: str
    name: str
    framework: str
    entry: str
    #: the job package archive (tar.gz) on the server's machine: backends whose workers run there
    #: (local) read it; the others declare ``FETCH_PACKAGE`` and hand workers ``package_url``
    package: Path
    output_dir: Path
    placement: tuple[WorkerPlacement, ...]
    env: dict[str, str] = field(default_factory=dict)
    files: JobFiles = field(default_factory=JobFiles)
    #: 0 for the first start; a preempted job is started again with the next number (and its
    #: earlier runs' logs are kept)
    attempt: int = 0
    #: restart policy per role, the job's restart limit and backoff (``core.restarts``)
    restarts: RestartRules = field(default_factory=RestartRules)

    #: the platform's URL and the job's token, for the workers (``PADDLECLOUD_API``, ``_JOB_TOKEN``)
    api: ApiAccess = field(default_factory=ApiAccess)
    #: elastic jobs: (min, max) trainers (torch jobs then run torchrun agents on a platform-hosted
    #: rendezvous store); None: a fixed number of trainers
    trainer_range: tuple[int, int] | None = None
    #: what each worker of a role ("pserver", "trainer") needs (backends that reserve it: Kubernetes)
    resources: Mapping[str, Resources] = field(default_factory=dict)
    #: the package's PFS path (backends whose workers fetch it over the API: Kubernetes)
    package_path: str = ""
    #: where a worker GETs the package with ``Authorization: Bearer <api.token>`` (the job token
    #: reads its own package and nothing else): ``<api.url>/api/v1/pfs/file?path=<package_path>``;
    #: "" when the platform has no ``api_url``. For ``FETCH_PACKAGE`` backends: give it to the
    #: worker as ``PADDLECLOUD_PACKAGE_URL`` and run ``runtime.bootstrap fetch`` before the entry
    package_url: str = ""
    #: the owner's PFS home and the public area on this machine (local file stores): what a
    #: sandboxed worker sees read-write and read-only (``backends/local/sandbox.py``); None: unknown
    home_dir: Path | None = None
    public_dir: Path | None = None
    #: adaptive-batch jobs: the spec's batch settings (Kubernetes writes them into the TrainingJob);
    #: the workers' variables are in ``env`` already (``PADDLECLOUD_BATCH_SIZE``, ...)
    batch: BatchSpec | None = None
    #: the SampleSet the job reads (``SAMPLESETS`` backends): each worker sees its node's mount
    #: read-only at ``PADDLECLOUD_SAMPLESET_DIR``
    sampleset: SampleSetRef | None = None
    #: the container image the workers run in (``IMAGES`` backends), canonical
    #: ``REGISTRY/REPOSITORY[:TAG][@DIGEST]`` (``core.imageref``); None: the backend's own environment
    image: str | None = None
    #: the job's owner's credentials for the image's registry (``paddlecloud image login``); only
    #: for the pull, never in a worker's environment, a log or an event
    image_auth: RegistryAuth | None = None

    def count(self, role: str) -> int:
        return sum(1 for p in self.placement if p.role == role)


@dataclass(frozen=True)
class WorkerStatus:
    name: str
    role: str
    index: int
    state: WorkerState
    node: str = ""
    endpoint: str = ""
    pid: int | None = None
    restarts: int = 0
    exit_code: int | None = None
    started_at: float | None = None
    finished_at: float | None = None
    log_path: str = ""
    #: why its last run ended as it did, when the backend knows more than the exit code
    #: (``OOMKilled``), and the details in words ("memory limit 512Mi")
    reason: WorkerReason = WorkerReason.NONE
    message: str = ""


@dataclass(frozen=True)
class BackendEvent:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class JobStatus:
    workers: tuple[WorkerStatus, ...] = ()
    #: Set when the job cannot go on: a worker failed or vanished, or preparation failed.
    failure: str | None = None
    #: the stable reason of ``failure``: ``WorkerFailed``, or ``StartFailed`` (a worker could not be
    #: started at all: the OS refused its command line or environment)
    failure_reason: str = "WorkerFailed"
    #: True once every process of the job has exited or been stopped.
    finished: bool = False
    #: Events that happened since the previous ``sync`` of this job.
    events: tuple[BackendEvent, ...] = ()


@dataclass(frozen=True)
class LogRequest:
    key: str
    workers: tuple[str, ...]  # several: every line is prefixed with "[worker] "
    tail: int | None = None  # last N lines; None: everything
    follow: bool = False
    previous: bool = False  # the run before the current one


class Backend(Protocol):
    name: str
    capabilities: frozenset[Capability]

    def nodes(self) -> tuple[NodeInfo, ...]:
        """Schedulable nodes and their capacity."""
        ...

    def start(self, launch: JobLaunch) -> None:
        """Begin running a job; returns at once (preparation continues in the background)."""
        ...

    def adopt(self, launch: JobLaunch) -> None:
        """After a server restart: take over a job started earlier, from the backend's own records."""
        ...

    def sync(self, key: str) -> JobStatus:
        """Advance the job's start sequence and report its workers."""
        ...

    def stop(self, key: str, grace: float) -> None:
        """Stop every process of the job (SIGTERM, ``grace`` seconds, SIGKILL). Idempotent."""
        ...

    def add_trainer(self, key: str, placement: WorkerPlacement) -> None:
        """Start one more trainer of a started job at ``placement`` (capability ``resize``); it
        gets the job's current endpoints. Returns at once."""
        ...

    def remove_trainer(self, key: str, grace: float) -> None:
        """Retire the trainer with the highest id (capability ``resize``): SIGTERM, ``grace`` seconds
        to checkpoint, then SIGKILL, in the background. A retired trainer is reported as ``Stopped``
        and never fails the job; its log is kept."""
        ...

    def read_log(self, req: LogRequest) -> Iterator[bytes]:
        """The worker's log; with ``follow``, keeps yielding until the worker has ended."""
        ...

    def disk_usage(self, key: str) -> Iterator[int]:
        """What the job's own folders on the engine's disks hold, in bytes (capability
        ``disk-usage``): everything the backend keeps for the job outside PFS (the workers' copies
        of the package and their /tmp while it runs, its logs until ``forget``), at least each
        file's size. A walk that can be paused: running totals every few hundred entries, the last
        one the total; a job it has no folders of: ``0``. Called from the controller's disk watch
        thread (never the reconcile loop) while the job exists, so it must not hold a lock that
        ``sync`` needs while it walks. Raises ``backends.jobdirs.DiskWalkError`` when the folders
        cannot be measured (the controller fails closed: docs/pfs.md).

        Retention (docs/pfs.md): when the job ends (``sync`` reports ``finished``) its scratch (the
        package's copies, /tmp) is removed, so a finished job holds its logs and statuses only."""
        ...

    def forget(self, key: str) -> None:
        """Drop a finished job's runtime files (logs included)."""
        ...

    def close(self) -> None:
        """Release resources held by the backend; running jobs keep running."""
        ...

    def confinement(self) -> Confinement:
        """How this backend's jobs are kept from other users' data (docs/security.md)."""
        ...
