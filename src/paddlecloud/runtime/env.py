"""Read the env contract (``docs/env-contract.md``) into a typed value inside a worker process."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from paddlecloud.runtime import contract as c
from paddlecloud.runtime import endpoints

__all__ = ["WorkerEnv", "env"]


@dataclass(frozen=True)
class WorkerEnv:
    """The platform-provided facts about this worker."""

    job_name: str
    role: str
    worker: str
    trainer_id: int
    trainers: int
    pserver_endpoints: tuple[str, ...]
    trainer_endpoints: tuple[str, ...]
    current_endpoint: str
    output_dir: str
    restart: int
    input_dir: str = ""  # "" when the job has no --input


def _split(value: str) -> tuple[str, ...]:
    return tuple(p for p in value.split(",") if p)


def env(environ: Mapping[str, str] | None = None) -> WorkerEnv:
    """Return the contract of the current worker; raises ``KeyError`` outside a PaddleCloud worker.
    Endpoints still written as placeholders (a program started without ``runtime.launcher`` on a
    backend that resolves them at run time) are resolved first: this waits, bounded, for the hosts
    of the workers it must know (``runtime.endpoints``)."""
    e = os.environ if environ is None else environ
    if e.get(c.ENDPOINTS_DIR) and "@" in e.get(c.CURRENT_ENDPOINT, ""):
        e = endpoints.resolve(e)
    return WorkerEnv(
        job_name=e[c.JOB_NAME],
        role=e[c.ROLE],
        worker=e[c.WORKER],
        trainer_id=int(e.get(c.TRAINER_ID, "0")),
        trainers=int(e[c.TRAINERS]),
        pserver_endpoints=_split(e.get(c.PSERVER_ENDPOINTS, "")),
        trainer_endpoints=_split(e.get(c.TRAINER_ENDPOINTS, "")),
        current_endpoint=e[c.CURRENT_ENDPOINT],
        output_dir=e[c.OUTPUT_DIR],
        restart=int(e.get(c.RESTART, "0")),
        input_dir=e.get(c.INPUT_DIR, ""),
    )
