"""Wire models of the ``/api/v1`` REST API (Pydantic v2). The JSON of ``-o json`` is these models.

Requests: :class:`JobSpec` (submit). Responses: :class:`JobView` (one row of ``get jobs``; its field set
is the documented stable schema), :class:`JobDetail` (``describe``), :class:`WorkerView`,
:class:`EventView`, :class:`QuotaView`, :class:`VersionView`, :class:`PackageView`.

Validation errors name the field and the rule; quantities use Kubernetes notation and are checked
with :mod:`paddlecloud.core.quantity` (per worker: cpu 1m..1024, memory 1Mi..64Ti). Numbers and
booleans are strict (``"3"`` is not 3; a priority may be a class name or digits, as ``--priority``
sends it). Strings and lists are bounded, and what a worker could not be started with (a NUL byte,
an environment over :mod:`paddlecloud.core.limits`) is refused at submit.

Specs read back (from the database, or from a server's answer) are validated with the context
:data:`STORED` (:meth:`JobSpec.from_stored`): the submit-time limits are not applied again, so a job
accepted by an earlier version stays readable, and the controller fails it alone if it cannot run.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from paddlecloud.api.adaptive import AdaptiveState, BatchRange, BatchSpec, LrRule
from paddlecloud.api.body import Body
from paddlecloud.api.stored import STORED, is_stored
from paddlecloud.api.tasks import TaskSpec
from paddlecloud.core.imageref import MAX_IMAGE_REF_CHARS, ImageRefError, parse_image_ref
from paddlecloud.core.limits import MAX_ENTRY_CHARS, env_problem, text_problem
from paddlecloud.core.names import check_dns1123_label, check_env_name
from paddlecloud.core.pfspath import MAX_PATH_BYTES
from paddlecloud.core.phases import JobPhase, WorkerReason, WorkerState
from paddlecloud.core.quantity import (
    QuantityError,
    parse_cpu,
    parse_cpu_request,
    parse_memory,
    parse_memory_request,
)
from paddlecloud.core.resources import Resources
from paddlecloud.core.restarts import RestartPolicy, RestartRules

__all__ = [
    "MAX_EXPECTED_DURATION_S",
    "MIN_EXPECTED_DURATION_S",
    "PRIORITY_CLASSES",
    "STORED",
    "AdaptiveState",
    "BatchRange",
    "BatchSpec",
    "EstimateView",
    "EventView",
    "Framework",
    "JobDetail",
    "JobList",
    "JobSpec",
    "JobView",
    "LrRule",
    "PackageView",
    "PserverSpec",
    "QuotaView",
    "ResourceView",
    "RestartPolicy",
    "RoleStatus",
    "TokenView",
    "TrainerSpec",
    "UserCreate",
    "UserList",
    "UserView",
    "VersionView",
    "WorkerList",
    "WorkerView",
]


#: Named priorities (``--priority high``); higher runs first and may preempt lower under the
#: preemptive policies.
PRIORITY_CLASSES: dict[str, int] = {"low": -100, "normal": 0, "high": 100}
#: bounds of ``JobSpec.expected_duration_s``
MIN_EXPECTED_DURATION_S = 60.0
MAX_EXPECTED_DURATION_S = 90 * 86400.0


class Framework(StrEnum):
    PADDLE_PS = "paddle-ps"
    PADDLE_COLLECTIVE = "paddle-collective"
    TORCH = "torch"
    NONE = "none"


def _cpu(v: str, info: ValidationInfo) -> str:
    try:
        (parse_cpu if is_stored(info) else parse_cpu_request)(v)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None
    return v


def _memory(v: str, info: ValidationInfo) -> str:
    try:
        (parse_memory if is_stored(info) else parse_memory_request)(v)
    except QuantityError as exc:
        raise ValueError(str(exc)) from None
    return v


def _text(v: str, info: ValidationInfo) -> str:
    problem = None if is_stored(info) else text_problem(v)
    if problem:
        raise ValueError(problem)
    return v


#: cpu per worker: 1m .. 1024 (cores); memory per worker: 1Mi .. 64Ti (``core.quantity``)
Cpu = Annotated[str, AfterValidator(_cpu)]
Memory = Annotated[str, AfterValidator(_memory)]
#: a string a worker is started with or a path: no NUL byte
Text = Annotated[str, AfterValidator(_text)]
PfsPath = Annotated[
    str, Field(min_length=1, max_length=MAX_PATH_BYTES, pattern=r"^/pfs/"), AfterValidator(_text)
]


class _Model(BaseModel):
    # Schemas are built on first use, not at import: the CLI starts ~80 ms faster.
    model_config = ConfigDict(defer_build=True)


class _Strict(_Model):
    model_config = ConfigDict(extra="forbid", defer_build=True)


_RESTART_HELP = "Never (default), OnFailure, or ExitCode (see JobSpec.retry_exit_codes)"


class PserverSpec(_Strict):
    count: int = Field(0, ge=0, le=64, strict=True)
    cpu: Cpu = "500m"
    memory: Memory = "512Mi"
    restart: RestartPolicy = Field(RestartPolicy.NEVER, description=_RESTART_HELP)

    def resources(self) -> Resources:
        return Resources(parse_cpu(self.cpu), parse_memory(self.memory), 0)


class TrainerSpec(_Strict):
    count: int = Field(1, ge=1, le=512, strict=True)
    min: int | None = Field(
        None, ge=1, le=512, strict=True, description="elastic lower bound (default: count)"
    )
    max: int | None = Field(
        None, ge=1, le=512, strict=True, description="elastic upper bound (default: count)"
    )
    cpu: Cpu = "500m"
    memory: Memory = "512Mi"
    gpu: int = Field(0, ge=0, le=16, strict=True)
    restart: RestartPolicy | None = Field(
        None,
        description="Never, OnFailure, or ExitCode (see JobSpec.retry_exit_codes); default Never, "
        "but OnFailure for the torchrun agents of an elastic torch job (an agent that fails rejoins)",
    )

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        lo = self.min if self.min is not None else self.count
        hi = self.max if self.max is not None else self.count
        if not lo <= self.count <= hi:
            raise ValueError(f"trainers must satisfy min <= count <= max, got {lo} <= {self.count} <= {hi}")
        return self

    def resources(self) -> Resources:
        return Resources(parse_cpu(self.cpu), parse_memory(self.memory), self.gpu)


def _canonical_image(text: str) -> str:
    try:
        return str(parse_image_ref(text))
    except ImageRefError as exc:
        raise ValueError(str(exc)) from None


#: a container image reference (``core.imageref``), stored in its canonical form
ImageName = Annotated[str, Field(max_length=MAX_IMAGE_REF_CHARS), AfterValidator(_canonical_image)]


class JobSpec(Body):
    """What a user submits.

    ``package`` is the PFS path of the job's package archive (tar.gz; ``paddlecloud submit`` uploads
    it to ``pfs:jobs/<name>/package.tar.gz``). ``input`` (read) and ``output`` (written) are PFS
    paths the workers see as local directories; ``output`` defaults to ``pfs:jobs/<name>/output``.
    """

    name: Annotated[str, AfterValidator(check_dns1123_label)]
    package: PfsPath
    entry: Text = Field(min_length=1, max_length=MAX_ENTRY_CHARS)
    input: PfsPath | None = None
    output: PfsPath | None = None
    framework: Framework = Framework.NONE
    pservers: PserverSpec = PserverSpec()
    trainers: TrainerSpec = TrainerSpec()
    env: dict[str, str] = Field(
        default_factory=dict, description="at most 256 variables, 64 KiB in all (KEY=VALUE each), no NUL"
    )
    #: a data task master for the job (``api.tasks``): None, no task master
    tasks: TaskSpec | None = None
    #: the job's global batch size and, opted in, the bounds the scheduler may move it within
    #: (``api.adaptive``): None, the job's batch is its own business
    batch: BatchSpec | None = None
    #: one of the owner's SampleSets (``api.samplesets``): every worker reads it at
    #: ``PADDLECLOUD_SAMPLESET_DIR`` (read-only); None: no SampleSet
    sampleset: Annotated[str, AfterValidator(check_dns1123_label)] | None = None
    #: the container image every worker runs in, ``REGISTRY/REPOSITORY[:TAG][@DIGEST]``
    #: (``core.imageref``; backends that declare ``images``); None: the backend's own environment
    #: (a virtualenv from the package's requirements.txt, or the Kubernetes backend's --image)
    image: ImageName | None = None
    priority: int = Field(
        0,
        ge=-1000,
        le=1000,
        strict=True,
        description="-1000..1000 (also as a string of digits), or a class name: "
        + ", ".join(PRIORITY_CLASSES),
    )
    max_restarts: int = Field(
        3,
        ge=0,
        le=1000,
        strict=True,
        description="restarts allowed over all workers of the job (restart policies)",
    )
    retry_exit_codes: list[Annotated[int, Field(strict=True)]] = Field(
        default_factory=list, max_length=64, description="exit codes the ExitCode policy retries (1..255)"
    )
    restart_backoff_s: float | None = Field(
        None,
        ge=0,
        le=600,
        strict=True,
        description="delay before a worker's first restart; default 1 s, but 0 for the torchrun agents "
        "of an elastic torch job (torch's rendezvous handles their return)",
    )
    restart_backoff_max_s: float = Field(
        30.0,
        ge=0,
        le=3600,
        strict=True,
        description="cap of the delay, which doubles per restart of the worker",
    )
    restart_backoff_reset_s: float = Field(
        600.0,
        ge=0,
        le=86_400,
        description="a worker run that lasted this long was stable: its worker's next restart waits "
        "restart_backoff_s again instead of the doubled delay (Kubernetes: 10 minutes)",
    )
    queue_anyway: bool = Field(
        False,
        strict=True,
        description="queue the job even if no node of a fixed-capacity cluster could ever hold it (it then "
        "waits with ExceedsNodeCapacity); by default such a job is refused with exceeds_capacity",
    )
    expected_duration_s: float | None = Field(
        None,
        ge=MIN_EXPECTED_DURATION_S,
        le=MAX_EXPECTED_DURATION_S,
        strict=True,
        description="how long the job runs at its requested trainer count, in seconds (60 s .. 90 days): "
        "the start-time forecast uses it for this job's end and the starts behind it (docs/scheduler.md); "
        "None: learned from its progress, else an assumed default",
    )

    @classmethod
    def from_stored(cls, data: Any) -> JobSpec:
        """A spec read back from the database: the submit-time limits are not applied again."""
        return cls.model_validate(data, context=STORED)

    @field_validator("priority", mode="before")
    @classmethod
    def _priority_class(cls, v: object) -> object:
        """A class name, or a number written as a string (what the CLI's ``--priority`` sends)."""
        if isinstance(v, str):
            if v.removeprefix("-").isdigit() and len(v) <= 20:
                return int(v)
            if v not in PRIORITY_CLASSES:
                known = ", ".join(f"{k} ({n})" for k, n in PRIORITY_CLASSES.items())
                raise ValueError(
                    f"unknown priority class {v[:40]!r}; known: {known}, or a number -1000..1000"
                )
            return PRIORITY_CLASSES[v]
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        for key in v:
            if len(key) > 256:
                raise ValueError(f"variable names are at most 256 characters, got one of {len(key)}")
            check_env_name(key)
        problem = None if is_stored(info) else env_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @field_validator("retry_exit_codes")
    @classmethod
    def _retry_codes(cls, v: list[int], info: ValidationInfo) -> list[int]:
        bad = [c for c in v if not 1 <= c <= 255]
        if bad:
            raise ValueError(f"exit codes are 1..255 (0 is success), got {bad[0]}")
        roles = [r for r in (info.data.get("trainers"), info.data.get("pservers")) if r is not None]
        if v and len(roles) == 2 and not any(r.restart == RestartPolicy.EXIT_CODE for r in roles):
            raise ValueError(
                "only used by the ExitCode policy: set trainers.restart or pservers.restart to ExitCode"
            )
        return sorted(set(v))

    @field_validator("restart_backoff_max_s")
    @classmethod
    def _backoff_cap(cls, v: float, info: ValidationInfo) -> float:
        first = info.data.get("restart_backoff_s")
        if first is not None and v < first:
            raise ValueError(f"must be at least restart_backoff_s ({first:g}), got {v:g}")
        return v

    @model_validator(mode="after")
    def _framework_roles(self) -> Self:
        if self.framework == Framework.PADDLE_PS and self.pservers.count < 1:
            raise ValueError("framework paddle-ps needs at least 1 pserver (pservers.count >= 1)")
        if self.framework in (Framework.PADDLE_COLLECTIVE, Framework.TORCH) and self.pservers.count:
            raise ValueError(f"framework {self.framework} runs no pservers (pservers.count must be 0)")
        return self

    @property
    def elastic_torch(self) -> bool:
        """An elastic torch job (its trainers between a min and a max): its torchrun agents meet on
        a rendezvous store the platform runs beside them (``JobLaunch.trainer_range``)."""
        t = self.trainers
        lo, hi = t.min or t.count, t.max or t.count
        return self.framework == Framework.TORCH and lo < hi

    def restart_rules(self) -> RestartRules:
        """The restart settings the backend applies (``core.restarts.decide``).

        The torchrun agents of an elastic torch job restart on failure and at once by default: the
        sooner a killed agent is back, the sooner it is in the survivors' next rendezvous round (a
        later one would restart the group a second time when it arrives)."""
        elastic_torch = self.framework == Framework.TORCH and (self.trainers.min or 0) < (
            self.trainers.max or 0
        )
        default = RestartPolicy.ON_FAILURE if elastic_torch else RestartPolicy.NEVER
        backoff = self.restart_backoff_s
        if backoff is None:
            backoff = 0.0 if elastic_torch else 1.0
        return RestartRules(
            trainer=self.trainers.restart or default,
            pserver=self.pservers.restart,
            max_restarts=self.max_restarts,
            retry_exit_codes=frozenset(self.retry_exit_codes),
            backoff_s=backoff,
            backoff_max_s=self.restart_backoff_max_s,
            backoff_reset_s=self.restart_backoff_reset_s,
        )


class RoleStatus(_Model):
    desired: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0


class EstimateView(_Model):
    """When a waiting job should start and a started job end, by the last forecast (the policy run
    forward from the cluster's state: docs/scheduler.md). ``start`` / ``end`` None: beyond the
    forecast, not before ``horizon``. A basis says how sure: the least certain duration the time
    rests on, ``profile`` > ``learned`` (measured progress) > ``declared`` (``expected_duration_s``)
    > ``unknown`` (a default assumed); None: it rests on none (a job that has started, or starts at
    once)."""

    start: datetime | None = None
    end: datetime | None = None
    start_basis: str | None = None
    end_basis: str | None = None
    horizon: datetime
    made_at: datetime


class JobView(_Model):
    """One job in a listing. Stable schema of ``paddlecloud get jobs -o json``."""

    name: str
    user: str
    phase: JobPhase
    framework: Framework
    pservers: RoleStatus
    trainers: RoleStatus
    priority: int = 0
    submitted_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    reason: str = ""
    message: str = ""
    #: queued and started jobs, once a forecast has seen them; None otherwise
    estimate: EstimateView | None = None


class JobList(_Model):
    items: list[JobView]


class EventView(_Model):
    time: datetime
    type: str  # Normal | Warning
    reason: str
    message: str


class WorkerView(_Model):
    name: str
    role: str
    index: int
    state: WorkerState
    node: str = ""
    endpoint: str = ""
    pid: int | None = None
    restarts: int = 0
    exit_code: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    #: the current run's log by name (``trainer-0.2.log``: run 2), read with ``logs JOB -w NAME``;
    #: never a path on the server or a node
    log: str = ""
    #: why the last run ended as it did, beyond its exit code ("OOMKilled"); "" none
    reason: WorkerReason = WorkerReason.NONE
    #: the details of ``reason`` in words (the limit that was passed)
    message: str = ""


class WorkerList(_Model):
    items: list[WorkerView]


class JobDetail(JobView):
    spec: JobSpec
    output_dir: str = ""
    events: list[EventView] = Field(default_factory=list)
    workers: list[WorkerView] = Field(default_factory=list)
    #: an adaptive-batch job's assignment and what it reported (None: not an adaptive job)
    adaptive: AdaptiveState | None = None


class ResourceView(_Model):
    """In a limit, ``cpu`` / ``memory`` may be ``"unlimited"`` and ``gpu`` -1 (no limit)."""

    cpu: str
    memory: str
    gpu: int


class QuotaView(_Model):
    user: str
    limit: ResourceView | None = Field(None, description="None: no per-user limit (the cluster is the limit)")
    used: ResourceView
    cluster: ResourceView
    jobs_running: int
    jobs_queued: int


class VersionView(_Model):
    version: str
    api_version: int
    min_client_api_version: int
    backend: str
    capabilities: list[str]
    max_package_bytes: int
    #: PFS paths on this server are /pfs/<datacenter>/...
    datacenter: str = ""


class UserView(_Model):
    name: str
    is_admin: bool = False


class UserList(_Model):
    items: list[UserView]


class UserCreate(Body):
    name: Annotated[str, AfterValidator(check_dns1123_label)]
    admin: bool = Field(False, strict=True)


class TokenView(_Model):
    """A freshly issued API token: shown once, stored by the server only as a hash."""

    name: str
    token: str


class PackageView(_Model):
    """A job package uploaded to PFS."""

    path: str
    size: int
    files: int
