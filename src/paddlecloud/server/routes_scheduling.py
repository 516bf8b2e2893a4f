"""``/api/v1/cluster`` and ``/api/v1/queue``: the nodes and the queue as the scheduler sees them.

Thin: parse, call ``ClusterState`` (``controller.loop.cluster_view``), return a view.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from paddlecloud.api.cluster import ClusterView, QueueView
from paddlecloud.server.deps import Caller, PlatformDep

__all__ = ["router"]

router = APIRouter(tags=["cluster"])


@router.get("/cluster", response_model=ClusterView)
def cluster(who: Caller, platform: PlatformDep) -> ClusterView:
    """The scheduling policy and every node: capacity and what is held on it."""
    return platform.cluster.cluster(who)


@router.get("/queue", response_model=QueueView)
def queue(
    who: Caller,
    platform: PlatformDep,
    user: Annotated[
        str | None, Query(max_length=64, description="only this user's jobs (admins: anyone's)")
    ] = None,
) -> QueueView:
    """The waiting jobs in scheduling order with their reasons (other users' jobs unnamed)."""
    return platform.cluster.queue(who, user)
