"""Gang placement of one job's workers on a :class:`FreeCapacity` copy: all workers or none.

Trainers are packed on as few nodes as possible (largest free node first); GPUs are never split
across nodes and specific GPU indices are assigned.
"""

from __future__ import annotations

from paddlecloud.core.resources import Resources
from paddlecloud.scheduler.decisions import WorkerPlacement
from paddlecloud.scheduler.snapshot import FreeCapacity, JobRequest, NodeState

__all__ = ["never_fits", "place_job"]


def _place_role(cap: FreeCapacity, role: str, count: int, need: Resources) -> list[WorkerPlacement] | None:
    out: list[WorkerPlacement] = []
    if count == 0:
        return out

    # Fill one node before opening another: the one that fits the most of these workers first.
    # Workers without GPUs go to nodes without GPUs first, so they do not fragment the GPU nodes.
    def key(n: str) -> tuple[int, int, int, int]:
        free = cap.free[n]
        fits = min(
            free.cpu_m // need.cpu_m if need.cpu_m else count,
            free.memory // need.memory if need.memory else count,
            free.gpu // need.gpu if need.gpu else count,
        )
        on_gpu_node = 1 if (need.gpu == 0 and cap.gpus[n]) else 0
        return (on_gpu_node, -min(fits, count), -free.cpu_m, -free.memory)

    # only nodes that can take at least one worker are ranked (a busy cluster has few)
    nodes = sorted((n for n in cap.order if need.fits_in(cap.free[n])), key=key)
    index = 0
    for node in nodes:
        while index < count and need.fits_in(cap.free[node]):
            gpus = tuple(cap.gpus[node][: need.gpu])
            del cap.gpus[node][: need.gpu]
            cap.free[node] = cap.free[node] - need
            out.append(WorkerPlacement(role, index, node, gpus))
            index += 1
        if index == count:
            return out
    return None if index < count else out


def place_job(cap: FreeCapacity, job: JobRequest) -> tuple[WorkerPlacement, ...] | None:
    """Place every worker of ``job`` on ``cap`` (mutating it) or return ``None`` leaving it unchanged."""
    trial = cap.copy()
    pservers = _place_role(trial, "pserver", job.pservers, job.pserver)
    if pservers is None:
        return None
    trainers = _place_role(trial, "trainer", job.trainers, job.trainer)
    if trainers is None:
        return None
    cap.free, cap.gpus = trial.free, trial.gpus
    return tuple(pservers + trainers)


def never_fits(nodes: tuple[NodeState, ...], job: JobRequest) -> str | None:
    """A message if some worker of ``job`` exceeds the capacity of every node, else ``None``."""
    for role, count, need in (("pserver", job.pservers, job.pserver), ("trainer", job.trainers, job.trainer)):
        if count and not any(need.fits_in(n.capacity) for n in nodes):
            largest = max((n.capacity for n in nodes), key=lambda r: (r.gpu, r.cpu_m, r.memory), default=None)
            has = largest.describe() if largest else "no nodes"
            return f"a {role} needs {need.describe()}, but the largest node has {has}"
    return None
