"""The EDL controller: the platform's scheduler policy sizing elastic TrainingJobs on Kubernetes.

    LIST Nodes, Pods, TrainingJobs ──build_snapshot()──▶ scheduler.Snapshot (+ what each job is)
        nodes     allocatable, minus the requests of every pod bound there and not finished
        running   jobs with pods on nodes: placement from their pods; resizable only when elastic
                  (min < max), sized by this controller (not the API server: label
                  paddlecloud.org/scheduler=platform) and settled (every desired pod bound)
        queue     jobs none of whose pods could be scheduled (reason Unschedulable / PodGroupPending):
                  the policy may shrink elastic jobs to make room for them
    scheduler.policy("elastic").schedule(snapshot) ──▶ Plan ──decide()──▶ [Resize] of resizable jobs
                  (a grow waits until every job's pods are bound: what they take is on no node yet)
    PATCH trainingjobs/scale (resourceVersion read, 409 retried) + annotation resized-at, an Event

Admissions and preemptions of the plan are not applied: the kube-scheduler places pods, and a job
is never stopped here. A job that is not elastic is pinned at what it holds and is never resized.
``build_snapshot`` and ``decide`` are pure; ``EdlController.step`` does the I/O.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from paddlecloud.backends.kubernetes import crd
from paddlecloud.backends.kubernetes.kube import Kube, api_status, retry_conflict
from paddlecloud.backends.kubernetes.launch import LABEL_SCHEDULER, PLATFORM
from paddlecloud.backends.kubernetes.quantities import amounts, node_info, pod_request
from paddlecloud.backends.kubernetes.spec import JobView, read_job
from paddlecloud.backends.kubernetes.status import observe, parse_time, rfc3339
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import JobRequest, NodeState, Plan, Snapshot, WorkerPlacement
from paddlecloud.scheduler import policy as make_policy

__all__ = [
    "ANNOTATION_REQUESTED",
    "ANNOTATION_RESIZED_AT",
    "EdlController",
    "JobRef",
    "Resize",
    "build_snapshot",
    "decide",
]

log = logging.getLogger("paddlecloud.edl")

ANNOTATION_RESIZED_AT = f"{crd.GROUP}/resized-at"
ANNOTATION_REQUESTED = f"{crd.GROUP}/requested-trainers"  # what the user asked, before the first resize
PRIORITIES = {"low": -100, "normal": 0, "high": 100}
_WAITING = ("Unschedulable", "PodGroupPending")
_FINISHED = ("Succeeded", "Failed")

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class JobRef:
    """A TrainingJob in the snapshot: where it is, and whether this controller may resize it."""

    namespace: str
    name: str
    replicas: int  # spec.trainer.replicas now
    lo: int
    hi: int
    resizable: bool
    settled: bool  # every desired pod of the job is bound to a node


@dataclass(frozen=True)
class Resize:
    job: JobRef
    trainers: int
    message: str


def _labels(obj: Obj) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _annotations(obj: Obj) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _nodes(nodes: Sequence[Obj], pods: Sequence[Obj]) -> tuple[tuple[NodeState, ...], dict[str, list[int]]]:
    """Node states (capacity, what bound pods hold) and, per node, the GPU indices pods hold."""
    infos = {n.name: n for n in (node_info(o) for o in nodes) if n is not None}
    used: dict[str, Resources] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node in infos and (pod.get("status") or {}).get("phase") not in _FINISHED:
            used[node] = used.get(node, Resources()) + pod_request(pod)
    gpus = {
        name: list(range(min(used.get(name, Resources()).gpu, info.capacity.gpu)))
        for name, info in infos.items()
    }
    states = tuple(
        NodeState(
            name, info.capacity, used.get(name, Resources()), tuple(range(len(gpus[name]), info.capacity.gpu))
        )
        for name, info in infos.items()
    )
    return states, gpus


def _role(job: JobView, role: str) -> Resources:
    spec = job.pserver if role == "pserver" else job.trainer
    return amounts(spec.requests, spec.limits)


def _placement(job: JobView, pods: Sequence[Obj], gpus: dict[str, list[int]]) -> tuple[WorkerPlacement, ...]:
    """The job's live, bound pods as placements (GPU indices taken from the node's held ones)."""
    out = []
    for pod in pods:
        v = observe(pod)
        if v is None or v.deleting or not v.node or v.node not in gpus or v.phase in _FINISHED:
            continue
        n = pod_request(pod).gpu
        held, gpus[v.node] = tuple(gpus[v.node][:n]), gpus[v.node][n:]
        out.append(WorkerPlacement(v.role, v.index, v.node, held))
    return tuple(sorted(out, key=lambda p: (p.role, p.index)))


def _request(
    tj: Obj, job: JobView, now: float, placement: tuple[WorkerPlacement, ...]
) -> tuple[JobRequest, JobRef]:
    trainers = [p for p in placement if p.role == "trainer"]
    settled = (
        len(trainers) == job.trainers and sum(p.role == "pserver" for p in placement) == job.pserver.replicas
    )
    resizable = job.trainer_range is not None and _labels(tj).get(LABEL_SCHEDULER) != PLATFORM and settled
    asked = int(_annotations(tj).get(ANNOTATION_REQUESTED) or job.trainers)
    lo, hi = (job.trainer_min, job.trainer_max) if resizable else (len(trainers), len(trainers))
    created = parse_time((tj.get("metadata") or {}).get("creationTimestamp")) or now
    started = parse_time(job.status.get("startTime")) or now
    resized = parse_time(_annotations(tj).get(ANNOTATION_RESIZED_AT))
    request = JobRequest(
        key=f"{job.namespace}/{job.name}",
        user=job.user,
        priority=PRIORITIES.get(job.scheduling.priority_class, 0),
        submitted_at=created,
        pservers=job.pserver.replicas,
        pserver=_role(job, "pserver"),
        trainers=min(max(asked, lo), hi) if trainers else job.trainers,
        trainer=_role(job, "trainer"),
        min_trainers=lo,
        max_trainers=hi,
        attained=max(now - started, 0.0) * max(len(trainers), 1),
        running=len(trainers),
        placement=placement,
        resized_at=resized if resized is not None else float("-inf"),
    )
    return request, JobRef(
        job.namespace, job.name, job.trainer.replicas, job.trainer_min, job.trainer_max, resizable, settled
    )


def build_snapshot(
    nodes: Sequence[Obj], pods: Sequence[Obj], jobs: Sequence[Obj], now: float, cycle: int
) -> tuple[Snapshot, dict[str, JobRef]]:
    """The scheduler's view of the cluster and each job's :class:`JobRef`, by key ``ns/name``."""
    states, gpus = _nodes(nodes, pods)
    by_job: dict[tuple[str, str], list[Obj]] = {}
    for pod in pods:
        job_name = _labels(pod).get(crd.LABEL_JOB)
        if job_name:
            by_job.setdefault(((pod.get("metadata") or {}).get("namespace", ""), job_name), []).append(pod)
    queue, running, refs = [], [], {}
    for tj in jobs:
        job = read_job(tj)
        if job.deleting or job.phase in _FINISHED:
            continue
        placement = _placement(job, by_job.get((job.namespace, job.name), []), gpus)
        request, ref = _request(tj, job, now, placement)
        if placement:
            running.append(request)
        elif job.status.get("reason") in _WAITING:
            queue.append(request)
        else:
            continue  # just created, or its pods are on their way: nothing to decide about it yet
        refs[request.key] = ref
    return Snapshot(cycle=cycle, now=now, nodes=states, queue=tuple(queue), running=tuple(running)), refs


def decide(plan: Plan, refs: Mapping[str, JobRef]) -> list[Resize]:
    """The plan's resizes this controller applies: resizable jobs only, within their bounds; no job
    grows while some job's pods wait for a node (what they will take is not on any node yet)."""
    grow = all(ref.settled for ref in refs.values())
    out = []
    for r in plan.resize:
        ref = refs.get(r.job)
        if ref is None or not ref.resizable or ref.lo >= ref.hi:
            continue  # never a job that is not elastic, nor one the API server sizes
        n = max(ref.lo, min(r.trainers, ref.hi))
        if n > ref.replicas and not grow:
            continue
        if n != ref.replicas:
            out.append(Resize(ref, n, r.message))
    return out


class EdlController:
    def __init__(
        self,
        kube: Kube,
        policy_name: str = "elastic",
        namespace: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kube, self.namespace, self.clock = kube, namespace, clock
        self.policy = make_policy(policy_name)
        self.cycle = 0

    def snapshot(self) -> tuple[Snapshot, dict[str, JobRef]]:
        self.cycle += 1
        nodes = self.kube.call(self.kube.core.list_node).get("items") or []
        pods = self.kube.list_pods(self.namespace)
        jobs = self.kube.list_jobs(self.namespace)
        return build_snapshot(nodes, pods, jobs, self.clock(), self.cycle)

    def step(self) -> list[Resize]:
        """One round: snapshot, policy, write the resizes; the resizes written."""
        snap, refs = self.snapshot()
        plan = self.policy.schedule(snap)
        done = []
        for r in decide(plan, refs):
            try:
                if self._write(r):
                    done.append(r)
            except client.ApiException as exc:
                log.warning("resizing %s/%s failed: %s", r.job.namespace, r.job.name, exc)
        return done

    def _write(self, r: Resize) -> bool:
        ns, name = r.job.namespace, r.job.name

        def attempt() -> bool:
            scale = self.kube.get_scale(ns, name)
            if int((scale.get("spec") or {}).get("replicas") or 0) != r.job.replicas:
                return False  # changed since the snapshot: the next round decides again
            rv = scale["metadata"]["resourceVersion"]
            self.kube.patch_scale(
                ns, name, {"metadata": {"resourceVersion": rv}, "spec": {"replicas": r.trainers}}
            )
            return True

        if not retry_conflict(attempt):
            return False
        now = rfc3339(self.clock())
        try:
            job = self.kube.get_job(ns, name)
            notes = {ANNOTATION_RESIZED_AT: now}
            if ANNOTATION_REQUESTED not in _annotations(job):
                notes[ANNOTATION_REQUESTED] = str(r.job.replicas)
            g, v, p = crd.GROUP, crd.VERSION, crd.PLURAL
            self.kube.call(
                self.kube.custom.patch_namespaced_custom_object,
                g,
                v,
                ns,
                p,
                name,
                {"metadata": {"annotations": notes}},
            )
            message = f"EDL: trainers {r.job.replicas} -> {r.trainers}: {r.message}"
            self.kube.post_event(job, "Normal", "Resized", message, now, "paddlecloud-edl")
        except client.ApiException as exc:
            if api_status(exc) != 404:
                raise
        log.info("resized %s/%s: %d -> %d trainers", ns, name, r.job.replicas, r.trainers)
        return True
