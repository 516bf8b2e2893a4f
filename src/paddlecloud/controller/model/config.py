"""Settings of the platform core, grouped (``paddlecloud up`` fills them from its options).

What runs the jobs is a backend name and that backend's own settings object, opaque here: the
backend registry (``backends.registry``) makes it from ``up``'s options and makes the backend from it.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paddlecloud.scheduler import DEFAULT_POLICY
from paddlecloud.scheduler.forecast import ForecastConfig

__all__ = ["ComputeLimits", "ForecastSettings", "MetricsAccess", "PlatformConfig"]


@dataclass(frozen=True)
class ComputeLimits:
    """Per-user limits on what running jobs hold; None in a dimension: no limit there."""

    cpu_m: int | None = None
    memory: int | None = None
    gpu: int | None = None


@dataclass(frozen=True)
class MetricsAccess:
    """Who may read ``GET /metrics`` besides admins (docs/metrics.md): anyone who reaches the port
    (``public``, ``up --metrics-public``), or whoever sends the scrape token (``up
    --metrics-token-file``; only its SHA-256 is kept), which grants nothing else."""

    public: bool = False
    token_sha256: str = ""

    @classmethod
    def with_token(cls, token: str) -> MetricsAccess:
        return cls(token_sha256=hashlib.sha256(token.encode()).hexdigest())

    def allows(self, token: str | None) -> bool:
        """Whether ``token`` (or none) may read the metrics without being an admin's."""
        if self.public:
            return True
        if not token or not self.token_sha256:
            return False
        return hmac.compare_digest(hashlib.sha256(token.encode()).hexdigest(), self.token_sha256)


@dataclass(frozen=True)
class ForecastSettings:
    """How often and how far the start-time forecast runs (``controller.loop.forecasts``)."""

    #: at most one forecast per this many seconds
    interval_s: float = 30.0
    #: forecast again after this long even if nothing changed (learned progress moves)
    max_age_s: float = 300.0
    #: wall-clock seconds one forecast may take; what it did not reach is "not before the horizon"
    budget_s: float = 2.0
    #: the duration assumed for a job with no other knowledge
    unknown_s: float = 3600.0
    #: its rounds and their bounds; 10 s of start-up assumed per start or resize
    rounds: ForecastConfig = field(default_factory=lambda: ForecastConfig(restart_s=10.0))


@dataclass(frozen=True)
class PlatformConfig:
    data_dir: Path
    #: SQLAlchemy URL; default: SQLite in WAL mode at ``<data_dir>/paddlecloud.db``.
    database_url: str | None = None
    #: scheduling policy (``scheduler.policy``): elastic, goodput, tiresias, edl, fifo, fifo-backfill
    policy: str = DEFAULT_POLICY
    max_package_bytes: int = 100 * 2**20
    #: the largest request body other than a PFS upload (``up --max-request-size``): job specs,
    #: leases and the rest are JSON of a few KiB; larger bodies get 413 ``request_too_large``
    max_request_bytes: int = 2**20
    #: Seconds between reconcile cycles when nothing wakes the loop earlier.
    tick_seconds: float = 1.0
    #: Default SIGTERM → SIGKILL grace when a user kills a job.
    kill_grace: float = 10.0
    #: SIGTERM → SIGKILL grace for a trainer removed by a shrink and for a preempted job (time to
    #: checkpoint).
    shrink_grace: float = 10.0
    #: Name of the user created by ``paddlecloud up`` for the single-machine setup.
    default_user: str = "default"
    #: This datacenter's name: PFS paths are /pfs/<datacenter>/...
    datacenter: str = "local"
    #: Default per-user PFS storage limit in bytes (None: unlimited); users.storage_quota overrides.
    storage_quota: int | None = 100 * 2**30
    #: seconds between two measures of the storage use of a user with running jobs (their PFS home
    #: and their jobs' own folders; ``controller.loop.diskwatch``): a job whose owner passes the storage
    #: quota is failed within about this, plus the walk's own time
    disk_check_s: float = 10.0
    #: compute limits given to each new non-admin user (``admin set-quota`` changes them later)
    default_quota: ComputeLimits = field(default_factory=ComputeLimits)
    #: this server's URL as workers reach it (``PADDLECLOUD_API``: the task master); "" unknown
    api_url: str = ""
    #: the CA bundle workers verify an https ``api_url`` with (``PADDLECLOUD_API_CA``); "": the system's
    api_ca: str = ""
    #: how long a job is kept while its backend calls meet transient errors (the engine unreachable)
    #: before it fails (``backends.errors.BackendUnavailable``)
    backend_retry_s: float = 300.0
    #: what runs the jobs: a name in the backend registry ("local", "kubernetes", ...)
    backend: str = "local"
    #: that backend's settings (``LocalSettings``, ``KubeSettings``, ...: its registry entry's
    #: ``settings_type``); None: its defaults
    backend_settings: Any = None
    #: who may read GET /metrics besides admins
    metrics_access: MetricsAccess = field(default_factory=MetricsAccess)
    #: the start-time forecast's refresh and cost bounds
    forecast: ForecastSettings = field(default_factory=ForecastSettings)

    @property
    def db_url(self) -> str:
        return self.database_url or f"sqlite:///{self.data_dir / 'paddlecloud.db'}"

    @property
    def pfs_dir(self) -> Path:
        return self.data_dir / "pfs"

    @property
    def cluster_dir(self) -> Path:
        return self.data_dir / "cluster"

    def job_dir(self, user: str, job: str) -> str:
        """The PFS directory of a job's package and (by default) its output."""
        return f"/pfs/{self.datacenter}/home/{user}/jobs/{job}"
