"""What the controller's parts share: settings, database, backend, clock, one mutex, one wake-up,
the platform's metrics (``controller.model.metrics``), its recorded history (``controller.model.history``) and
what the disk watch measured (``controller.model.diskbook``).

The mutex serialises every change of job state: a reconcile cycle holds it from start to end, and
request handlers hold it only around their database writes (never across a slow backend call; a
preemption's stop runs in a thread of its own, ``stop_in_background``).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from sqlalchemy import inspect as sa_inspect
from sqlalchemy.orm import Session, object_session

from paddlecloud.api import API_PREFIX
from paddlecloud.api.models import JobSpec
from paddlecloud.backends.base import RENDEZVOUS, STORE_NEED, Backend, Capability, JobLaunch
from paddlecloud.backends.errors import BackendError
from paddlecloud.backends.images import RegistryAuth
from paddlecloud.backends.samplesets import SampleSetRef
from paddlecloud.controller.model.batches import BatchPlans, adaptive_spec, batch_env
from paddlecloud.controller.model.config import PlatformConfig
from paddlecloud.controller.model.diskbook import DiskBook
from paddlecloud.controller.model.forecast_board import ForecastBoard
from paddlecloud.controller.model.history import History
from paddlecloud.controller.model.jobtokens import issue_job_token
from paddlecloud.controller.model.metrics import PlatformMetrics
from paddlecloud.controller.model.placement import placed
from paddlecloud.controller.model.ports import PfsSpace
from paddlecloud.controller.model.registry_logins import SecretBox, auth_for
from paddlecloud.controller.model.sampleset_refs import launch_ref
from paddlecloud.controller.model.specs import SpecCache
from paddlecloud.core.clock import Clock
from paddlecloud.core.envcontract import ApiAccess, JobFiles
from paddlecloud.core.imageref import parse_image_ref
from paddlecloud.core.phases import TERMINAL_PHASES, JobPhase, check_transition
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import WorkerPlacement
from paddlecloud.store.db import Database
from paddlecloud.store.tables import EventRow, JobRow

__all__ = ["Context", "EngineUnits", "job_key", "package_url"]

log = logging.getLogger("paddlecloud.controller")


def job_key(user: str, name: str) -> str:
    return f"{user}/{name}"


def package_url(api_url: str, pfs_path: str) -> str:
    """Where a worker fetches its job's package with the job token (``Capability.FETCH_PACKAGE``)."""
    if not api_url:
        return ""
    return f"{api_url.rstrip('/')}{API_PREFIX}/pfs/file?path={quote(pfs_path, safe='/')}"


def _trainer_range(spec: JobSpec) -> tuple[int, int] | None:
    t = spec.trainers
    lo, hi = t.min or t.count, t.max or t.count
    return (lo, hi) if lo < hi else None


@dataclass(frozen=True)
class EngineUnits:
    """What the backend's engine really allocates, which plans and counts must hold
    (``job_rows.job_request``): CPUs in units of ``cpu_unit_m`` (``Capability.WHOLE_CPUS``: 1000)
    and, with ``store_worker`` (``Capability.STORE_WORKER``), an elastic torch job's rendezvous
    store as a worker of ``STORE_NEED`` (planned as the job's one pserver: torch jobs have none)."""

    cpu_unit_m: int = 1
    store_worker: bool = False

    def store(self, spec: JobSpec) -> Resources | None:
        """What ``spec``'s rendezvous store is planned at; None: it has none the engine allocates."""
        return STORE_NEED.cpus_in_units(self.cpu_unit_m) if self.store_worker and spec.elastic_torch else None


@dataclass
class Context:
    config: PlatformConfig
    db: Database
    backend: Backend
    clock: Clock
    files: PfsSpace
    mutex: threading.RLock = field(default_factory=threading.RLock)
    wake_event: threading.Event = field(default_factory=threading.Event)
    #: jobs whose ``stop_in_background`` raised, by key: the reconciler fails them (StopFailed), or
    #: stops them again when the error was transient
    stop_failures: dict[str, BaseException] = field(default_factory=dict)
    #: jobs whose backend calls meet transient errors, by key: when the streak began
    #: (``controller.loop.failures.backend_trouble``)
    retrying: dict[str, float] = field(default_factory=dict)
    #: stored specs parsed once per job (every cycle reads every queued and running job's)
    specs: SpecCache = field(default_factory=SpecCache)
    #: adaptive-batch jobs' best batch and goodput per trainer count, until their next report
    batch_plans: BatchPlans = field(default_factory=BatchPlans)
    #: this platform's Prometheus registry and counters (never the process-wide default registry)
    metrics: PlatformMetrics = field(default_factory=PlatformMetrics)
    #: cluster use and queue over the last hour, each job's trainers over time (for charts)
    history: History = field(default_factory=History)
    #: the latest start-time forecast (``controller.loop.forecasts``); None: none is made
    forecasts: ForecastBoard | None = None
    #: seals and opens the users' registry passwords (``model.registry_logins``); None: no logins
    secrets: SecretBox | None = None
    #: what the disk watch measured: the users' jobs' folders, the users over their storage quota
    #: (``controller.loop.diskwatch``; the file service reads the first, the reconciler takes the second)
    disk: DiskBook = field(default_factory=DiskBook)

    @property
    def engine_units(self) -> EngineUnits:
        """What the backend's engine allocates (``Capability.WHOLE_CPUS``, ``STORE_WORKER``), which
        plans and counts use (``job_rows.job_request``)."""
        caps = self.backend.capabilities
        return EngineUnits(1000 if Capability.WHOLE_CPUS in caps else 1, Capability.STORE_WORKER in caps)

    def wake(self) -> None:
        self.wake_event.set()

    def stop_in_background(self, key: str, grace: float) -> None:
        """``backend.stop(key, grace)`` in a thread of its own (nobody waits for the grace period);
        the loop is woken when it returns, to see the job's processes gone."""

        def run() -> None:
            try:
                self.backend.stop(key, grace)
            except Exception as exc:  # the reconciler fails the job or, if transient, stops it again
                if isinstance(exc, BackendError):
                    log.warning("stopping %s failed: %s", key, exc)
                else:
                    log.exception("stopping %s failed", key)
                self.stop_failures[key] = exc
            finally:
                self.wake()

        threading.Thread(target=run, name=f"stop-{key}", daemon=True).start()

    def session(self) -> Session:
        return self.db.session()

    def event(self, row: JobRow, type_: str, reason: str, message: str) -> None:
        """Record a job event. A stored job whose events were not read gets the row added beside it
        (reading them later loads it too): recording never loads the job's whole history."""
        ev = EventRow(time=self.clock.now(), type=type_, reason=reason, message=message)
        s = object_session(row)
        if s is not None and row.id is not None and "events" in sa_inspect(row).unloaded:
            ev.job_id = row.id
            s.add(ev)
        else:
            row.events.append(ev)

    def move(self, row: JobRow, to: JobPhase, reason: str, message: str) -> None:
        """The one writer of a job's phase: the move checked against the job state machine
        (``core.phases``; one it does not have raises ``InvalidTransition``, a bug), the reason and
        message written with it, ``finished_at`` set when the phase is terminal. Events stay the
        caller's (their wording differs by cause). ``tests/unit/test_phase_writes.py`` fails if
        another module assigns a job's ``.phase``."""
        check_transition(JobPhase(row.phase), to)
        row.phase, row.reason, row.message = to, reason, message
        if to in TERMINAL_PHASES and row.finished_at is None:
            row.finished_at = self.clock.now()

    def workers_placed(self, row: JobRow, spec: JobSpec | None = None) -> tuple[WorkerPlacement, ...]:
        """``row``'s placement as the backend's workers: a planned store, the job's one "pserver"
        placement (``EngineUnits``), is the ``rendezvous`` worker it runs."""
        parsed = spec if spec is not None else self.specs.get(row)
        store = self.engine_units.store(parsed) is not None
        return tuple(
            dataclasses.replace(p, role=RENDEZVOUS) if store and p.role == "pserver" else p
            for p in placed(row)
        )

    def launch(self, row: JobRow) -> JobLaunch:
        parsed = self.specs.get(row)
        store = self.engine_units.store(parsed)
        placement = self.workers_placed(row, parsed)
        resources = {"pserver": parsed.pservers.resources(), "trainer": parsed.trainers.resources()}
        input_path = str(parsed.input or "")
        input_dir = self.files.local_path(self.files.parse(input_path)) if input_path else None
        return JobLaunch(
            key=job_key(row.user, row.name),
            user=row.user,
            name=row.name,
            framework=row.framework,
            entry=str(parsed.entry),
            package=self._local(row.package_id),
            output_dir=Path(row.output_dir),
            placement=placement,
            env={**parsed.env, **batch_env(parsed, row.adaptive)},
            files=JobFiles(input_dir=str(input_dir or ""), input=input_path, output=str(parsed.output or "")),
            attempt=max(row.attempts - 1, 0),
            restarts=parsed.restart_rules(),
            api=self._api(row),
            trainer_range=_trainer_range(parsed),
            resources={**resources, RENDEZVOUS: STORE_NEED} if store is not None else resources,
            package_path=row.package_id,
            package_url=package_url(self.config.api_url, row.package_id),
            home_dir=self._area(f"/pfs/{self.config.datacenter}/home/{row.user}"),
            public_dir=self._area(f"/pfs/{self.config.datacenter}/public"),
            batch=adaptive_spec(parsed),
            sampleset=self._sampleset(row, parsed.sampleset),
            image=parsed.image,
            image_auth=self._image_auth(row.user, parsed.image),
        )

    def _image_auth(self, owner: str, image: str | None) -> RegistryAuth | None:
        """The job's owner's login for its image's registry, and nobody else's."""
        if image is None or self.secrets is None:
            return None
        with self.session() as s:
            return auth_for(s, self.secrets, owner, parse_image_ref(image).registry)

    def _sampleset(self, row: JobRow, name: str | None) -> SampleSetRef | None:
        """The SampleSet the job reads (``JobRejected`` when it is gone: the job fails alone)."""
        s = object_session(row)
        if name is None or s is None:
            return None
        return launch_ref(s, row.user, name, self.files, self.backend)

    def _area(self, pfs_path: str) -> Path | None:
        """Where a PFS area is on this machine (None for stores without local paths)."""
        return self.files.local_path(self.files.parse(pfs_path))

    def _api(self, row: JobRow) -> ApiAccess:
        """The server's URL and a fresh job token for this start of the job; the token's row joins
        ``row``'s session (its caller commits before any worker can use it)."""
        s = object_session(row)
        if s is None:  # pragma: no cover - launch() is always given an attached row
            raise RuntimeError("launch() needs a job row attached to a session")
        token = issue_job_token(s, row.id, self.clock.now())
        return ApiAccess(url=self.config.api_url, token=token, ca=self.config.api_ca)

    def _local(self, pfs_path: str) -> Path:
        local = self.files.local_path(self.files.parse(pfs_path))
        if local is None:  # pragma: no cover - only local stores exist so far
            raise RuntimeError("this file store cannot give workers local paths")
        return local
