"""What the controller's parts share: settings, database, backend, clock, one mutex, one wake-up.

The mutex serialises every change of job state: a reconcile cycle holds it from start to end, and
request handlers hold it only around their database writes (never across a slow backend call).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from sqlalchemy.orm import Session

from paddlecloud.backends.base import Backend, JobLaunch
from paddlecloud.controller.config import PlatformConfig
from paddlecloud.controller.packages import PackageStore
from paddlecloud.core.clock import Clock
from paddlecloud.scheduler import WorkerPlacement
from paddlecloud.store.db import Database
from paddlecloud.store.tables import EventRow, JobRow

__all__ = ["Context", "job_key"]


def job_key(user: str, name: str) -> str:
    return f"{user}/{name}"


@dataclass
class Context:
    config: PlatformConfig
    db: Database
    backend: Backend
    clock: Clock
    packages: PackageStore
    mutex: threading.RLock = field(default_factory=threading.RLock)
    wake_event: threading.Event = field(default_factory=threading.Event)

    def wake(self) -> None:
        self.wake_event.set()

    def session(self) -> Session:
        return self.db.session()

    def event(self, row: JobRow, type_: str, reason: str, message: str) -> None:
        row.events.append(EventRow(time=self.clock.now(), type=type_, reason=reason, message=message))

    def launch(self, row: JobRow) -> JobLaunch:
        placement = tuple(
            WorkerPlacement(p["role"], int(p["index"]), p["node"], tuple(p.get("gpus", ())))
            for p in (row.placement or [])
        )
        return JobLaunch(
            key=job_key(row.user, row.name),
            user=row.user,
            name=row.name,
            framework=row.framework,
            entry=str(row.spec["entry"]),
            package=self.packages.path(row.package_id),
            output_dir=self.config.output_dir(row.user, row.name),
            placement=placement,
            env=dict(row.spec.get("env", {})),
        )
