"""``GET /metrics`` (Prometheus) and ``/api/v1/cluster/history`` (the recorded cluster use and queue).

Thin: who may read the metrics and what they hold are the platform's (``Platform.metrics_text``,
``controller.model.metrics``); the history is ``controller.model.history``'s. A job's trainers over time are a
job route (``routes_jobs``: ``/api/v1/jobs/{name}/history``).
"""

from __future__ import annotations

from fastapi import APIRouter, Response

from paddlecloud.api.history import ClusterHistory
from paddlecloud.controller.model.metrics import CONTENT_TYPE
from paddlecloud.server.deps import BearerToken, Caller, PlatformDep

__all__ = ["metrics_router", "router"]

#: under /api/v1
router = APIRouter()
#: at the root, where Prometheus looks by default
metrics_router = APIRouter()


@metrics_router.get("/metrics", tags=["metrics"], response_class=Response)
def metrics(token: BearerToken, platform: PlatformDep) -> Response:
    """Every metric in the Prometheus text format (docs/metrics.md). Needs an admin's token or the
    scrape token of ``up --metrics-token-file``, unless the server runs with ``--metrics-public``."""
    return Response(platform.metrics_text(token), media_type=CONTENT_TYPE)


@router.get("/cluster/history", response_model=ClusterHistory, tags=["metrics"])
def cluster_history(who: Caller, platform: PlatformDep) -> ClusterHistory:
    """The cluster's allocation, capacity and queue over the last hour (one point per interval);
    aggregate numbers only, for any signed-in user."""
    return platform.history.cluster_view()
