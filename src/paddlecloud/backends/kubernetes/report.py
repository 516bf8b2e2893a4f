"""What the API server reports about a job on Kubernetes: its TrainingJob and Pods → ``JobStatus``.

    TrainingJob dict (or None: gone) + its Pod dicts + Seen (earlier syncs) ──report()──▶ JobStatus
        workers   one per pod (status.observe), plus workers seen before whose pod is gone
        events    the job's reason when it changes (why it waits, in Kubernetes' words), each pod's
                  scheduling / image problem once, restarts (status.workerRuns)
        failure   the TrainingJob's message once it is Failed
        finished  the job ended (or is gone) and none of its pods is still pending or running

Worker states: Pending → Pending; Running → Running; Succeeded → Succeeded; Failed → Failed when the
job failed, Stopped when the platform stopped it in place, Pending while a restart is decided or
waiting; a pod being deleted is Stopped (scale-down, kill) or Pending (a restart); Unknown → Lost.
Pure: no client, no clock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from paddlecloud.backends.base import BackendEvent, JobStatus, WorkerStatus
from paddlecloud.backends.kubernetes.pods import TRAINER, WORKER_PORT
from paddlecloud.backends.kubernetes.spec import read_job
from paddlecloud.backends.kubernetes.status import PodView, observe, oom_message, oom_reason, parse_time
from paddlecloud.core.phases import ENDED_WORKER_STATES, WorkerReason, WorkerState

__all__ = ["WARNING_REASONS", "Seen", "report"]

Obj = Mapping[str, Any]

#: reasons of the TrainingJob's status reported as Warning events
WARNING_REASONS = frozenset(
    {
        "Unschedulable", "PodGroupPending", "SchedulingGated", "ImagePullBackOff", "ErrImagePull",
        "CreateContainerConfigError", "CrashLoopBackOff", "InvalidImageName", "Restarting",
        "WorkerFailed", "BackoffLimitExceeded", "DeadlineExceeded", "InvalidSpec",
    }
)  # fmt: skip
_ALIVE_PHASES = ("Pending", "Running", "Unknown")


@dataclass
class Seen:
    """One job's earlier syncs: what was reported, so events say only what changed."""

    workers: dict[str, WorkerStatus] = field(default_factory=dict)
    reason: tuple[str, str] = ("", "")
    runs: dict[str, int] = field(default_factory=dict)
    pod_problems: dict[str, tuple[str, str]] = field(default_factory=dict)


def _map(d: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = d.get(key)
    return dict(value) if isinstance(value, Mapping) else {}


def _container(pod: Obj) -> dict[str, Any]:
    for cs in _map(pod, "status").get("containerStatuses") or ():
        if isinstance(cs, Mapping) and cs.get("name") == "worker":
            return dict(cs)
    statuses = _map(pod, "status").get("containerStatuses") or ()
    return dict(statuses[0]) if statuses else {}


def _state(p: PodView, job_status: Mapping[str, Any], desired: int) -> WorkerState:
    runs = _map(job_status, "workerRuns")
    restarting = int(runs.get(p.worker, 0)) > p.run
    if p.deleting:
        return WorkerState.PENDING if restarting else WorkerState.STOPPED
    if p.role == TRAINER and p.index >= desired and p.phase in _ALIVE_PHASES:
        return WorkerState.STOPPED  # being removed by a scale-down
    if p.phase == "Failed":
        if p.stopped:
            return WorkerState.STOPPED
        return WorkerState.FAILED if job_status.get("phase") == "Failed" else WorkerState.PENDING
    return {
        "Running": WorkerState.RUNNING,
        "Succeeded": WorkerState.SUCCEEDED,
        "Unknown": WorkerState.LOST,
    }.get(p.phase, WorkerState.PENDING)


def _worker(pod: Obj, p: PodView, job_status: Mapping[str, Any], desired: int) -> WorkerStatus:
    st = _map(pod, "status")
    cs = _container(pod)
    state = _map(cs, "state")
    term = _map(state, "terminated")
    ip = str(st.get("podIP") or "")
    meta = _map(pod, "metadata")
    return WorkerStatus(
        name=p.worker,
        role=p.role,
        index=p.index,
        state=_state(p, job_status, desired),
        node=p.node,
        endpoint=f"{ip}:{WORKER_PORT}" if ip else "",
        restarts=p.run,
        exit_code=int(term["exitCode"]) if "exitCode" in term else None,
        started_at=parse_time(_map(state, "running").get("startedAt") or term.get("startedAt")),
        finished_at=parse_time(term.get("finishedAt")),
        log_path=f"{meta.get('namespace')}/{meta.get('name')}",
        reason=WorkerReason.OOM_KILLED if oom_reason(st) else WorkerReason.NONE,
        message=oom_message(pod) or "",
    )


def _gone(w: WorkerStatus, ending: bool, desired: int) -> WorkerStatus:
    """A worker whose pod is gone: its last state if it had ended, else Stopped or Pending (the
    operator creates it again)."""
    if w.state in ENDED_WORKER_STATES:
        return w
    retired = w.role == TRAINER and w.index >= desired
    state = WorkerState.STOPPED if ending or retired else WorkerState.PENDING
    return dataclasses.replace(w, state=state)


def _events(job: Obj | None, views: Sequence[PodView], seen: Seen) -> list[BackendEvent]:
    out: list[BackendEvent] = []
    for p in views:
        problem = p.unscheduled or p.stuck
        if problem and seen.pod_problems.get(p.worker) != problem:
            out.append(BackendEvent("Warning", problem[0], f"{p.worker}: {problem[1]}"))
        if problem:
            seen.pod_problems[p.worker] = problem
        else:
            seen.pod_problems.pop(p.worker, None)
    status = _map(job or {}, "status")
    for worker, run in sorted(_map(status, "workerRuns").items()):
        if int(run) > seen.runs.get(worker, 0):
            last = _map(status, "lastFailure")
            why = (
                f": {last.get('reason')} (exit code {last.get('exitCode')})"
                if last.get("worker") == worker
                else ""
            )
            out.append(BackendEvent("Warning", "WorkerRestarted", f"{worker} restarted as run {run}{why}"))
        seen.runs[worker] = int(run)
    reason = (str(status.get("reason") or ""), str(status.get("message") or ""))
    if reason[0] and reason != seen.reason and not any(e.message == reason[1] for e in out):
        kind = "Warning" if reason[0] in WARNING_REASONS else "Normal"
        out.append(BackendEvent(kind, reason[0], reason[1]))
    if reason[0]:
        seen.reason = reason
    return out


def report(job: Obj | None, pods: Sequence[Obj], seen: Seen, stopping: bool = False) -> JobStatus:
    """The job's status from its TrainingJob (None once deleted) and pods; updates ``seen``."""
    view = read_job(job) if job is not None else None
    job_status = view.status if view is not None else {}
    desired = view.trainers if view is not None else 0
    pairs = [(pod, v) for pod in pods if (v := observe(pod)) is not None]
    workers = {v.worker: _worker(pod, v, job_status, desired) for pod, v in pairs}
    phase = str(job_status.get("phase") or "")
    ending = stopping or view is None or view.deleting or phase in ("Succeeded", "Failed")
    for name, w in seen.workers.items():
        if name not in workers:
            workers[name] = _gone(w, ending, desired)
    seen.workers = dict(workers)
    alive = any(_map(pod, "status").get("phase", "Pending") in _ALIVE_PHASES for pod, _ in pairs)
    failure = None
    if phase == "Failed" and not stopping:
        failure = str(job_status.get("message") or job_status.get("reason") or "the job failed")
    over = view is None or view.deleting or phase in ("Succeeded", "Failed")
    return JobStatus(
        workers=tuple(sorted(workers.values(), key=lambda w: (w.role != "pserver", w.role, w.index))),
        failure=failure,
        finished=over and not alive,
        events=tuple(_events(job, [v for _, v in pairs], seen)),
    )
