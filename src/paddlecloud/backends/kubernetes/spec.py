"""A TrainingJob dict read into a typed, defaulted, frozen :class:`JobView`.

    TrainingJob dict (as the API server returns it) ──read_job()──▶ JobView ──▶ pods.py, objects.py

Defaults here are the CRD's (``crd.py``), so a dict that skipped API-server defaulting (a test, a fake
server) reads the same. Nothing is validated beyond what reconcile needs: the API server validated
the spec against the CRD schema already; :func:`problems` lists what would still break pod names.
Pure.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from paddlecloud._version import __version__
from paddlecloud.backends.kubernetes.crd import check_job_name
from paddlecloud.core.envcontract import batch_vars
from paddlecloud.core.restarts import RestartPolicy, RestartRules

__all__ = [
    "DEFAULT_PLATFORM_IMAGE",
    "GPU",
    "JobView",
    "RoleSpec",
    "Scheduling",
    "Storage",
    "problems",
    "read_job",
]

#: the image of the fetch / wait init containers when ``spec.platform.image`` is not set
DEFAULT_PLATFORM_IMAGE = f"paddlecloud:{__version__}"
GPU = "nvidia.com/gpu"

Quantities = dict[str, str | int]


@dataclass(frozen=True)
class RoleSpec:
    replicas: int
    requests: Quantities = field(default_factory=dict)
    limits: Quantities = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return int(self.limits.get(GPU, self.requests.get(GPU, 0)) or 0)


@dataclass(frozen=True)
class Storage:
    claim: str
    files_path: str = "pfs/files"
    datacenter: str = "local"


@dataclass(frozen=True)
class Scheduling:
    queue: str = ""
    priority_class: str = ""
    scheduler_name: str = ""
    min_available: int | None = None

    @property
    def volcano(self) -> bool:
        return self.scheduler_name == "volcano"


@dataclass(frozen=True)
class JobView:
    """Everything reconcile reads from a TrainingJob."""

    name: str
    namespace: str
    uid: str
    generation: int
    deleting: bool
    finalizers: tuple[str, ...]
    user: str
    job_name: str
    image: str
    #: the Secret the pods pull ``image`` with ("": none)
    image_pull_secret: str
    entry: str
    framework: str
    package_url: str
    package_path: str
    api: str
    token_secret: str
    platform_image: str
    storage: Storage | None
    input: str
    output: str
    env: dict[str, str]
    pserver: RoleSpec
    trainer: RoleSpec
    trainer_min: int
    trainer_max: int
    rules: RestartRules
    active_deadline: int | None
    clean_pod_policy: str
    ttl_after_finished: int | None
    grace: int
    scheduling: Scheduling
    status: dict[str, Any]
    #: the SampleSet whose claim the pods mount read-only ("": none)
    sampleset: str = ""
    #: ``spec.network.egress``: more IP blocks the job's NetworkPolicy lets its pods reach, each
    #: ``{"cidr", "except", "ports": [{"port", "protocol"}]}`` (``network.py``)
    egress: tuple[dict[str, Any], ...] = ()

    @property
    def trainers(self) -> int:
        """Desired trainers: ``spec.trainer.replicas`` clamped to ``[min, max]``."""
        return max(self.trainer_min, min(self.trainer.replicas, self.trainer_max))

    @property
    def trainer_range(self) -> tuple[int, int] | None:
        """Elastic bounds, as the local backend's ``JobLaunch.trainer_range``."""
        return (self.trainer_min, self.trainer_max) if self.trainer_min < self.trainer_max else None

    @property
    def elastic_torch(self) -> bool:
        """Elastic torch jobs run torchrun agents on a platform-hosted rendezvous store."""
        return self.framework == "torch" and self.trainer_range is not None

    @property
    def phase(self) -> str:
        return str(self.status.get("phase") or "")


def _map(d: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = d.get(key)
    return dict(value) if isinstance(value, Mapping) else {}


def _role(d: dict[str, Any], default_replicas: int) -> RoleSpec:
    res = _map(d, "resources")
    return RoleSpec(
        replicas=int(d.get("replicas", default_replicas)),
        requests=_map(res, "requests"),
        limits=_map(res, "limits"),
    )


def _rules(spec: dict[str, Any], elastic_torch: bool) -> RestartRules:
    default = "OnFailure" if elastic_torch else "Never"
    return RestartRules(
        trainer=RestartPolicy(spec.get("restartPolicy") or default),
        pserver=RestartPolicy(_map(spec, "pserver").get("restartPolicy") or "Never"),
        max_restarts=int(spec.get("backoffLimit", 3)),
        retry_exit_codes=frozenset(int(c) for c in spec.get("retryExitCodes") or ()),
        backoff_s=float(spec.get("restartBackoffSeconds", 1.0)),
        backoff_max_s=float(spec.get("restartBackoffMaxSeconds", 30.0)),
    )


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _storage(spec: dict[str, Any]) -> Storage | None:
    s = _map(spec, "storage")
    if not s.get("claimName"):
        return None
    return Storage(
        claim=str(s["claimName"]),
        files_path=str(s.get("filesPath") or "pfs/files").strip("/"),
        datacenter=str(s.get("datacenter") or "local"),
    )


def _scheduling(spec: dict[str, Any]) -> Scheduling:
    s = _map(spec, "scheduling")
    return Scheduling(
        queue=str(s.get("queue") or ""),
        priority_class=str(s.get("priorityClassName") or ""),
        scheduler_name=str(s.get("schedulerName") or ""),
        min_available=_opt_int(s.get("minAvailable")),
    )


def _egress(spec: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    out = []
    for rule in _map(spec, "network").get("egress") or ():
        if not isinstance(rule, Mapping) or not rule.get("cidr"):
            continue
        ports = [
            {"port": int(p["port"]), "protocol": str(p.get("protocol") or "TCP")}
            for p in rule.get("ports") or ()
            if isinstance(p, Mapping) and p.get("port")
        ]
        out.append(
            {"cidr": str(rule["cidr"]), "except": [str(e) for e in rule.get("except") or ()], "ports": ports}
        )
    return tuple(out)


def _batch_env(spec: dict[str, Any]) -> dict[str, str]:
    """An adaptive batch (``spec.batch`` with min and max) as the workers' variables; ``spec.env``
    wins (the platform writes the batch it assigned there)."""
    batch = _map(spec, "batch")
    if "size" not in batch or "min" not in batch or "max" not in batch:
        return {}
    size = int(batch["size"])
    return batch_vars(
        size, (int(batch["min"]), int(batch["max"])), size, str(batch.get("lrRule") or "adascale")
    )


def read_job(obj: Mapping[str, Any]) -> JobView:
    """Read a TrainingJob dict (``metadata``, ``spec``, ``status``)."""
    meta = _map(obj, "metadata")
    spec = _map(obj, "spec")
    trainer = _role(_map(spec, "trainer"), 1)
    lo = int(_map(spec, "trainer").get("min") or trainer.replicas)
    hi = int(_map(spec, "trainer").get("max") or trainer.replicas)
    package = _map(spec, "package")
    platform = _map(spec, "platform")
    framework = str(spec.get("framework") or "none")
    name = str(meta.get("name") or "")
    return JobView(
        name=name,
        namespace=str(meta.get("namespace") or "default"),
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 0),
        deleting=bool(meta.get("deletionTimestamp")),
        finalizers=tuple(meta.get("finalizers") or ()),
        user=str(spec.get("user") or ""),
        job_name=str(spec.get("jobName") or name),
        image=str(spec.get("image") or ""),
        image_pull_secret=str(spec.get("imagePullSecret") or ""),
        entry=str(spec.get("entry") or ""),
        framework=framework,
        package_url=str(package.get("url") or ""),
        package_path=str(package.get("path") or ""),
        api=str(platform.get("api") or "").rstrip("/"),
        token_secret=str(platform.get("tokenSecret") or ""),
        platform_image=str(platform.get("image") or DEFAULT_PLATFORM_IMAGE),
        storage=_storage(spec),
        input=str(spec.get("input") or ""),
        output=str(spec.get("output") or ""),
        env=_batch_env(spec) | {str(k): str(v) for k, v in _map(spec, "env").items()},
        pserver=_role(_map(spec, "pserver"), 0),
        trainer=trainer,
        trainer_min=min(lo, hi),
        trainer_max=hi,
        rules=_rules(spec, framework == "torch" and lo < hi),
        active_deadline=_opt_int(spec.get("activeDeadlineSeconds")),
        clean_pod_policy=str(spec.get("cleanPodPolicy") or "None"),
        ttl_after_finished=_opt_int(spec.get("ttlSecondsAfterFinished")),
        grace=int(spec.get("terminationGracePeriodSeconds", 30)),
        scheduling=_scheduling(spec),
        status=_map(obj, "status"),
        sampleset=str(_map(spec, "sampleset").get("name") or ""),
        egress=_egress(spec),
    )


def problems(job: JobView) -> list[str]:
    """What makes the job impossible to run as pods (the CRD's CEL rules, for servers without CEL)."""
    out: list[str] = []
    why = check_job_name(job.name)
    if why:
        out.append(why)
    if not job.user or not job.image or not job.entry:
        out.append("spec.user, spec.image and spec.entry are required")
    if bool(job.package_url) == bool(job.package_path):
        out.append("spec.package needs exactly one of url and path")
    if job.package_path and not job.api:
        out.append("spec.package.path needs spec.platform.api (the file service to fetch it from)")
    if job.framework == "paddle-ps" and job.pserver.replicas < 1:
        out.append("framework paddle-ps needs at least 1 pserver (pserver.replicas >= 1)")
    if job.framework in ("paddle-collective", "torch") and job.pserver.replicas:
        out.append(f"framework {job.framework} runs no pservers (pserver.replicas must be 0)")
    for rule in job.egress:  # the NetworkPolicy would be refused, and no pod made without it
        for block in (rule["cidr"], *rule["except"]):
            try:
                ipaddress.ip_network(block, strict=False)
            except ValueError:
                out.append(f"spec.network.egress: {block!r} is not a CIDR (e.g. 10.0.0.0/8)")
    return out
