"""The platform core: job operations, the reconcile loop and how they are assembled.

Routes call :class:`JobService` methods; the :class:`Reconciler` thread moves jobs through their
phases; :class:`Platform` wires both to a database and a backend.
"""

from __future__ import annotations

from paddlecloud.controller.model.config import ComputeLimits, ForecastSettings, MetricsAccess, PlatformConfig
from paddlecloud.controller.model.identity import Identity
from paddlecloud.controller.model.jobtokens import JobIdentity, is_job_token
from paddlecloud.controller.platform.wiring import Platform
from paddlecloud.controller.services.jobs import JobService

__all__ = [
    "ComputeLimits",
    "ForecastSettings",
    "Identity",
    "JobIdentity",
    "JobService",
    "MetricsAccess",
    "Platform",
    "PlatformConfig",
    "is_job_token",
]
