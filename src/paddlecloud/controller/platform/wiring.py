"""Assemble the platform core from a :class:`PlatformConfig`: database, backend, services, loop.

    Platform.open(config) ─┬─ store.open_database(url)   (Alembic upgrade to head)
                           ├─ registry.entry(config.backend).create(settings, data dir, ...)
                           ├─ FileService (PFS, LocalDirStore), UserDirectory, JobService
                           │                      (deleting a user spans the three: delete_user,
                           │                      controller.platform.user_deletion)
                           ├─ TaskService (the jobs' data task masters)
                           ├─ AdaptiveService (adaptive-batch jobs' reports and assignment)
                           ├─ SampleSetService + SampleSetLoop (controller.services.samplesets and
                           │                      controller.loop.sampleset_loop: cached data
                           │                      sets; their caches count in the storage quota)
                           ├─ Reconciler(policy)         (``start()`` adopts running jobs, then loops)
                           ├─ DiskWatch                  (storage use of users with running jobs,
                           │                      measured in a thread; over quota: the reconciler
                           │                      fails their jobs; controller.loop.diskwatch)
                           ├─ ClusterState               (nodes and queue as the scheduler sees them)
                           ├─ Forecaster                 (start-time estimates, controller.loop.forecasts)
                           └─ PlatformMetrics (a registry of its own) + History (controller.model.history)

``metrics_text(token)`` is ``GET /metrics`` (who may read it: ``PlatformConfig.metrics_access``);
``history`` the recorded time series the console charts.

The server holds one Platform; tests build one against a temp dir and a manual clock.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from paddlecloud.api.users import UserDeleted
from paddlecloud.backends import registry
from paddlecloud.backends.base import Backend, BackendSetup, Capability
from paddlecloud.backends.registry import BackendConfigError
from paddlecloud.controller.loop.cluster_view import ClusterState
from paddlecloud.controller.loop.diskwatch import DiskWatch
from paddlecloud.controller.loop.forecasts import Forecaster
from paddlecloud.controller.loop.reconciler import Reconciler
from paddlecloud.controller.loop.sampleset_loop import SampleSetLoop
from paddlecloud.controller.model.config import PlatformConfig
from paddlecloud.controller.model.context import Context
from paddlecloud.controller.model.diskbook import DiskBook
from paddlecloud.controller.model.forecast_board import ForecastBoard
from paddlecloud.controller.model.history import History
from paddlecloud.controller.model.identity import Identity, require_admin
from paddlecloud.controller.model.limits import storage_quota
from paddlecloud.controller.model.metrics import PlatformMetrics, live_figures
from paddlecloud.controller.model.readcache import ReadCache
from paddlecloud.controller.model.registry_logins import SecretBox
from paddlecloud.controller.model.sampleset_refs import cached_bytes_of
from paddlecloud.controller.platform.user_deletion import UserDeletion
from paddlecloud.controller.services.adaptive import AdaptiveService
from paddlecloud.controller.services.files import FileService
from paddlecloud.controller.services.files_local import LocalTransfers
from paddlecloud.controller.services.jobs import JobService
from paddlecloud.controller.services.registries import RegistryLogins
from paddlecloud.controller.services.samplesets import SampleSetService
from paddlecloud.controller.services.tasks import TaskService
from paddlecloud.controller.services.users import UserDirectory
from paddlecloud.core.clock import Clock, SystemClock
from paddlecloud.scheduler import policy as make_policy
from paddlecloud.storage import LocalDirStore
from paddlecloud.store.db import open_database

__all__ = ["Platform"]


def _backend(config: PlatformConfig, clock: Clock, wake: Callable[[], None]) -> Backend:
    """The configured backend, made by its registry entry (``UnknownBackend`` for an unknown name)."""
    setup = BackendSetup(config.backend_settings, config.data_dir, config.datacenter, clock.now, wake)
    return registry.entry(config.backend).create(setup)


@dataclass
class Platform:
    ctx: Context
    jobs: JobService
    users: UserDirectory
    reconciler: Reconciler
    files: FileService
    tasks: TaskService
    cluster: ClusterState
    adaptive: AdaptiveService
    #: SampleSets: the requests, and the loop that drives their lifecycle (a thread of its own)
    samplesets: SampleSetService
    sampleset_loop: SampleSetLoop
    #: the users' container-registry logins (``paddlecloud image login``)
    registries: RegistryLogins
    #: refreshes the start-time forecast (``controller.loop.forecasts``) in a thread of its own
    forecaster: Forecaster | None = None
    #: measures the storage use of users with running jobs in a thread of its own (tests: ``step``)
    disk_watch: DiskWatch | None = None
    #: the PFS same-host fast path (grants; the server's Unix socket sets its address)
    pfs_local: LocalTransfers = field(init=False, repr=False)
    #: sha256 of a user token -> who it is; dropped on any write to the users table
    _tokens: ReadCache[str, Identity] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.pfs_local = LocalTransfers(self.files)
        self._tokens = ReadCache(self.ctx.db.changes, ("users",), max_age=_TOKEN_CACHE_AGE)

    @classmethod
    def open(
        cls, config: PlatformConfig, clock: Clock | None = None, backend: Backend | None = None
    ) -> Platform:
        clock = clock or SystemClock()
        config.data_dir.mkdir(parents=True, exist_ok=True)
        # the real path: sandboxes reach PFS paths without following links (backends/local/sandbox.py)
        config = dataclasses.replace(config, data_dir=config.data_dir.resolve())
        holder: list[Context] = []

        def wake() -> None:
            if holder:
                holder[0].wake()

        if backend is None:  # first: an unknown or unusable backend leaves nothing open
            backend = _backend(config, clock, wake)
        if Capability.FETCH_PACKAGE in backend.capabilities and not config.api_url:
            backend.close()
            raise BackendConfigError(
                f"the {backend.name} backend's workers fetch their job package over the API: "
                "give the server's URL as they reach it (up --api-url)"
            )
        db = open_database(config.db_url)

        def quota_of(user: str) -> int | None:
            with db.session() as s:
                return storage_quota(s, user, config.storage_quota)

        def cached_of(user: str) -> int:
            with db.session() as s:
                return cached_bytes_of(s, user)

        metrics = PlatformMetrics()
        disk = DiskBook()
        files = FileService(
            LocalDirStore(config.pfs_dir), config.datacenter, quota_of, metrics, cached_of, disk.user_bytes
        )
        secrets = SecretBox(config.data_dir / "secrets" / "registry.key")
        ctx = Context(
            config=config, db=db, backend=backend, clock=clock, files=files, metrics=metrics, disk=disk,
            secrets=secrets,
        )  # fmt: skip
        holder.append(ctx)
        reconciler = Reconciler(ctx, make_policy(config.policy))
        metrics.watch(lambda: live_figures(db, reconciler.nodes))
        ctx.forecasts = ForecastBoard(db.changes)
        forecaster = Forecaster(
            ctx.forecasts, reconciler.policy, reconciler.forecast_snapshot, ctx.session, config.forecast
        )
        sampleset_loop = SampleSetLoop(ctx)
        return cls(
            ctx=ctx,
            jobs=JobService(ctx, files),
            users=UserDirectory(clock, config.default_quota),
            reconciler=reconciler,
            files=files,
            tasks=TaskService(ctx),
            cluster=ClusterState(ctx, reconciler),
            adaptive=AdaptiveService(ctx),
            samplesets=SampleSetService(ctx, files, sampleset_loop.wake),
            sampleset_loop=sampleset_loop,
            registries=RegistryLogins(ctx, secrets),
            forecaster=forecaster,
            disk_watch=DiskWatch(ctx),
        )

    @property
    def history(self) -> History:
        """Cluster use and queue over the last hour, each job's trainers over time (the console's
        charts): ``history.cluster_history()``, ``history.job_trainers_history("user/name")``."""
        return self.ctx.history

    def metrics_text(self, token: str | None) -> bytes:
        """``GET /metrics``: every metric in the Prometheus text format, for whoever
        ``config.metrics_access`` lets read it (``Unauthorized`` / ``Forbidden`` otherwise)."""
        access = self.ctx.config.metrics_access
        if not access.allows(token):
            require_admin(
                self.authenticate(token), "reading /metrics (or: the scrape token of up --metrics-token-file)"
            )
        return self.ctx.metrics.exposition()

    def start(self) -> None:
        self.reconciler.start()
        self.sampleset_loop.start()
        if self.forecaster is not None:
            self.forecaster.start()
        if self.disk_watch is not None:
            self.disk_watch.start()

    def stop_loops(self) -> None:
        """Stop the threads :meth:`start` started (the reconcile loop, the forecaster, the disk watch)."""
        if self.disk_watch is not None:
            self.disk_watch.stop()
        if self.forecaster is not None:
            self.forecaster.stop()
        self.sampleset_loop.stop()
        self.reconciler.stop()

    def close(self) -> None:
        self.stop_loops()
        self.ctx.backend.close()
        self.ctx.db.dispose()

    def delete_user(
        self, who: Identity, name: str, *, force: bool = False, delete_files: bool = False
    ) -> UserDeleted:
        """Delete user ``name`` (admins only, never yourself): ``controller.platform.user_deletion``."""
        deletion = UserDeletion(self.users, self.jobs, self.files)
        return deletion.delete(who, name, force=force, delete_files=delete_files)

    def ensure_user(self, name: str, *, admin: bool = False) -> str:
        with self.ctx.session() as s:
            return self.users.create_or_rotate(s, name, admin=admin)

    def authenticate(self, token: str | None) -> Identity:
        """Who ``token`` belongs to (``Unauthorized`` if nobody). Answers from memory while the users
        table is unchanged (a rotated or revoked token stops working at once)."""
        if not token or self._tokens is None:
            with self.ctx.session() as s:
                return self.users.authenticate(s, token)

        def look_up() -> Identity:
            with self.ctx.session() as s:
                return self.users.authenticate(s, token)

        return self._tokens.get_or_build(_digest(token), look_up)

    def cached_identity(self, token: str | None) -> Identity | None:
        """:meth:`authenticate` from memory only (no database); None when it would have to look."""
        if not token or self._tokens is None:
            return None
        return self._tokens.get(_digest(token))


#: seconds a token lookup is reused at most (a write from another server process is seen after it)
_TOKEN_CACHE_AGE = 5.0


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()
