"""Refuse at submit a job that no node of a fixed-capacity cluster could ever hold.

A cluster whose nodes are all there is (the backend declares ``Capability.FIXED_CAPACITY``: the
local backend) would keep such a job queued forever. Like Slurm ("Requested node configuration is
not available"), the submit is refused instead (422 ``exceeds_capacity``), with the capacity in the
message and what to change, unless the spec says ``queue_anyway`` (``submit --queue-anyway``): the
job then waits with ``ExceedsNodeCapacity``. Clusters that may grow (Kubernetes with an autoscaler)
queue it as before. The decision is ``scheduler.never_placeable`` on the nodes as they are when idle.

On an engine shared with other work (``Capability.SHARED_CAPACITY``: Slurm), :func:`name_foreign_load`
adds to the reason of each job waiting for capacity what that work holds ("node n1: 3 of 4 CPUs held
by other users' jobs") and what the engine says about its nodes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from paddlecloud.api.errors import ErrorCode, InvalidInput
from paddlecloud.api.models import JobSpec
from paddlecloud.backends.base import Capability, NodeInfo
from paddlecloud.controller.model.context import Context, job_key
from paddlecloud.controller.model.job_rows import fixed_workers
from paddlecloud.controller.model.placement import placed
from paddlecloud.core.quantity import format_cpu, human_memory
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import JobRequest, NodeState, Plan, Snapshot, Wait, WaitReason, never_placeable
from paddlecloud.store.tables import JobRow

__all__ = ["check_capacity", "foreign_load", "name_foreign_load", "node_states"]

#: the waits that are about capacity held by others
_CAPACITY_WAITS = (WaitReason.INSUFFICIENT_RESOURCES, WaitReason.LOWER_PRIORITY, WaitReason.FAIR_SHARE)


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
        **fixed_workers(spec, ctx.engine_units),
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


def foreign_load(nodes: Sequence[NodeInfo]) -> str:
    """What work that is not ours holds on each node, and what the engine says about it; "" none."""
    parts = []
    for n in nodes:
        f, cap = n.foreign, n.capacity
        held = [
            text
            for amount, text in (
                (f.cpu_m, f"{format_cpu(f.cpu_m)} of {format_cpu(cap.cpu_m)} CPUs"),
                (f.memory, f"{human_memory(f.memory)} of {human_memory(cap.memory)} memory"),
                (f.gpu, f"{f.gpu} of {cap.gpu} GPUs"),
            )
            if amount
        ]
        said = [", ".join(held) + " held by other users' jobs"] if held else []
        if n.note:
            said.append(n.note)
        if said:
            parts.append(f"node {n.name}: {'; '.join(said)}")
    return "; ".join(parts)


def name_foreign_load(plan: Plan, nodes: Sequence[NodeInfo], snap: Snapshot) -> Plan:
    """``plan`` with the foreign load added to the message of each job waiting for capacity, and
    of each elastic job admitted or resized to fewer trainers than its maximum ("admitted with 2
    trainers on n3, 3 wanted: node n1: 4 of 4 CPUs held by other users' jobs; Slurm: bob's job 12")."""
    note = foreign_load(nodes)
    if not note:
        return plan
    waits = [
        Wait(w.job, w.reason, f"{w.message} ({note})") if w.reason in _CAPACITY_WAITS else w
        for w in plan.wait
    ]
    wanted = {j.key: j.hi for j in (*snap.queue, *snap.running)}

    def short(job: str, trainers: int, message: str) -> str:
        hi = wanted.get(job, 0)
        return f"{message}, {hi} wanted ({note})" if trainers < hi else message

    admits = [
        dataclasses.replace(a, message=short(a.job, sum(p.role == "trainer" for p in a.placement), a.message))
        for a in plan.admit
    ]
    resizes = [dataclasses.replace(r, message=short(r.job, r.trainers, r.message)) for r in plan.resize]
    return dataclasses.replace(plan, wait=waits, admit=admits, resize=resizes)


def node_states(ctx: Context, holding: Sequence[JobRow], nodes: Sequence[NodeInfo]) -> tuple[NodeState, ...]:
    """The nodes as the policy sees them (and the cluster page shows them): what this platform's
    started jobs (``holding``) hold by their placements, plus, on a shared engine
    (``SHARED_CAPACITY``), what the engine reports that other work holds."""
    used: dict[str, Resources] = {}
    gpus_used: dict[str, set[int]] = {}
    for row in holding:  # what each worker holds, from the spec (not a whole JobRequest: the cycle
        fixed = fixed_workers(ctx.specs.get(row), ctx.engine_units)  # builds that once per job)
        for p in placed(row):
            need = fixed["pserver"] if p.role == "pserver" else fixed["trainer"]
            used[p.node] = used.get(p.node, Resources()) + need
            gpus_used.setdefault(p.node, set()).update(p.gpus)
    shared = Capability.SHARED_CAPACITY in ctx.backend.capabilities
    out = []
    for n in nodes:
        held = used.get(n.name, Resources()) + (n.foreign if shared else Resources())
        taken = gpus_used.get(n.name, set()) | (set(n.foreign_gpus) if shared else set())
        free_gpus = tuple(g for g in n.gpus if g not in taken)
        out.append(NodeState(name=n.name, capacity=n.capacity, allocated=held, free_gpus=free_gpus))
    return tuple(out)
