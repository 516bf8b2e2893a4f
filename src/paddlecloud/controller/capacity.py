"""Refuse at submit a job that no node of a fixed-capacity cluster could ever hold.

A cluster whose nodes are all there is (the backend declares ``Capability.FIXED_CAPACITY``: the
local backend) would keep such a job queued forever. Like Slurm ("Requested node configuration is
not available"), the submit is refused instead (422 ``exceeds_capacity``), with the capacity in the
message and what to change, unless the spec says ``queue_anyway`` (``submit --queue-anyway``): the
job then waits with ``ExceedsNodeCapacity``. Clusters that may grow (Kubernetes with an autoscaler)
queue it as before. The decision is ``scheduler.never_placeable`` on the nodes as they are when idle.
"""

from __future__ import annotations

from paddlecloud.api.errors import ErrorCode, InvalidInput
from paddlecloud.api.models import JobSpec
from paddlecloud.backends.base import Capability
from paddlecloud.controller.context import Context, job_key
from paddlecloud.scheduler import JobRequest, NodeState, never_placeable

__all__ = ["check_capacity"]


def check_capacity(ctx: Context, user: str, spec: JobSpec) -> None:
    """Raise ``exceeds_capacity`` if ``spec`` could never be placed on this fixed-capacity cluster."""
    if spec.queue_anyway or Capability.FIXED_CAPACITY not in ctx.backend.capabilities:
        return
    idle = tuple(NodeState(n.name, n.capacity, free_gpus=n.gpus) for n in ctx.backend.nodes())
    elastic = Capability.RESIZE in ctx.backend.capabilities  # else it runs at its count, as scheduled
    request = JobRequest(
        key=job_key(user, spec.name),
        user=user,
        priority=spec.priority,
        submitted_at=0.0,
        pservers=spec.pservers.count,
        pserver=spec.pservers.resources(),
        trainers=spec.trainers.count,
        trainer=spec.trainers.resources(),
        min_trainers=(spec.trainers.min or 0) if elastic else 0,
    )
    found = never_placeable(idle, request)
    if found is None:
        return
    role, why = found
    raise InvalidInput(
        f"{why}, so the job could never start on this cluster: ask for less per {role} (--cpu, --memory, "
        f"--gpu{', --pscpu, --psmemory' if role == 'pserver' else ''}) or fewer trainers, or submit it with "
        "--queue-anyway (spec queue_anyway) to wait until the cluster has room",
        code=ErrorCode.EXCEEDS_CAPACITY,
        field=f"{role}s",
    )
