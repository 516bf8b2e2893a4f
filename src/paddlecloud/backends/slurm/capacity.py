"""What the Slurm backend tells the scheduler about the cluster: each node's size and the load of
work that is not ours, and where an elastic torch job's rendezvous store fits.

    SlurmBackend.nodes ──sinfo (cluster_nodes)──▶ snapshot(found, requested_by_us(jobs),
                                                           foreign_holders(jobs, squeue))
                       ──▶ NodeInfo per node: capacity, ``foreign`` (other users' jobs and our
                           rendezvous stores the plan did not place), a note naming them
    SlurmBackend.start ──store_node(launch, last snapshot, requested_by_us(jobs))──▶ a node or ""
                       (a store the plan did not place: the plan places it, STORE_WORKER)

Pure functions over the backend's records and Slurm's answers: no command runs here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from paddlecloud.backends.base import RENDEZVOUS, JobLaunch, NodeInfo
from paddlecloud.backends.slurm.commands import SlurmJob, SlurmNode
from paddlecloud.backends.slurm.job_record import JobRecord
from paddlecloud.backends.slurm.script import DEFAULT_NEED, MIB
from paddlecloud.core.phases import WorkerState
from paddlecloud.core.resources import Resources

__all__ = ["allocated", "foreign_holders", "requested_by_us", "snapshot", "store_node"]


def allocated(launch: JobLaunch, role: str) -> Resources:
    """What Slurm allocates a worker of ``role``: its request with the CPU rounded up to whole CPUs
    (``--cpus-per-task``), as the controller plans it (``Capability.WHOLE_CPUS``)."""
    return launch.resources.get(role, DEFAULT_NEED).cpus_in_units(1000)


def requested_by_us(jobs: Iterable[JobRecord]) -> dict[str, Resources]:
    """What our running workers hold, per node: the load the controller counts itself (from
    its placements), so the store only where the plan placed it (``Capability.STORE_WORKER``),
    not retired trainers, and not a worker that runs elsewhere than it was placed (a restart:
    Slurm chose its node; the controller still counts it where it was placed, so it is counted
    twice rather than not at all, which would let the scheduler plan onto what it holds)."""
    out: dict[str, Resources] = {}
    for job in jobs:
        with job.lock:
            for w in job.workers.values():
                planned = w.role != RENDEZVOUS or job.launch.count(RENDEZVOUS) > 0
                if w.state == WorkerState.RUNNING and w.ran_on == w.node and planned:
                    out[w.ran_on] = out.get(w.ran_on, Resources()) + allocated(job.launch, w.role)
    return out


def foreign_holders(jobs: Iterable[JobRecord], running: Sequence[SlurmJob]) -> dict[str, list[str]]:
    """Per node, the running Slurm jobs that are not our workers: ``bob's job 12 (big, 8 CPUs)``
    (the wait reasons name them)."""
    ours: set[int | None] = set()
    for job in jobs:
        with job.lock:
            ours |= {w.slurm_id for w in [*job.workers.values(), *job.retired.values()]}
    out: dict[str, list[str]] = {}
    for j in running:
        if j.id in ours:
            continue
        for node in j.node_names:
            out.setdefault(node, []).append(f"{j.user}'s job {j.id} ({j.name}, {j.cpus} CPUs)")
    return out


def snapshot(
    found: Sequence[SlurmNode], mine: Mapping[str, Resources], holders: Mapping[str, list[str]]
) -> tuple[NodeInfo, ...]:
    """The nodes as the scheduler sees them: a node that is down, drained or not responding has no
    capacity until it is back, and says why; the others their size and what Slurm allocated there
    beyond what our running workers asked for (``mine``), with the holders named."""
    out = []
    for n in found:
        if not n.usable:  # no capacity until it is back; its state named in wait reasons
            state = "+".join([n.state, *(f.lower() for f in n.flags)])
            why = f"Slurm: {state}" + (f" ({n.reason})" if n.reason else "") + ", takes no work"
            out.append(NodeInfo(n.name, Resources(), note=why))
            continue
        ours = mine.get(n.name, Resources())
        foreign = Resources(
            max(n.alloc_cpus * 1000 - ours.cpu_m, 0),
            max(n.alloc_memory_mib * MIB - ours.memory, 0),
            max(n.alloc_gpus - ours.gpu, 0),
        )
        size = Resources(n.cpus * 1000, n.memory_mib * MIB, n.gpus)
        note = f"Slurm: {', '.join(holders[n.name])}" if foreign and holders.get(n.name) else ""
        # Slurm picks the GPU indices: which ones other work holds is not ours to know, only how
        # many (the highest indices stand for them)
        held = tuple(range(n.gpus - foreign.gpu, n.gpus))
        out.append(NodeInfo(n.name, size, tuple(range(n.gpus)), foreign, held, note))
    return tuple(out)


def store_node(launch: JobLaunch, nodes: Sequence[NodeInfo], mine: Mapping[str, Resources]) -> str:
    """Where the rendezvous store of ``launch`` fits beside its planned trainers: the node with the
    most CPUs left after them in the last snapshot ("" : none has room, Slurm chooses). Only for
    a launch whose plan did not place the store (``Capability.STORE_WORKER``: a launch from a
    server before it): put where Slurm likes, it could take a CPU a trainer planned there needs."""
    planned: dict[str, Resources] = {}
    for p in launch.placement:
        planned[p.node] = planned.get(p.node, Resources()) + allocated(launch, p.role)
    room = {
        n.name: n.capacity - n.foreign - mine.get(n.name, Resources()) - planned.get(n.name, Resources())
        for n in nodes
    }
    fits = [(free.cpu_m, name) for name, free in room.items() if DEFAULT_NEED.fits_in(free)]
    return max(fits)[1] if fits else ""
