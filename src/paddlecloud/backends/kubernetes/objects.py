"""Pure reconcile of one TrainingJob: what is observed in, a :class:`ObjectPlan` of what to do out.

    reconcile(TrainingJob, its Pods, its Services, now, its PodGroups, its NetworkPolicies)
      1 deleting ─────────▶ delete pods / services / PodGroup; finalizer "remove" once no pod is left
      2 finished ─────────▶ clean up per cleanPodPolicy (stop in place / delete), TTL → delete_job
      3 invalid, deadline ▶ Failed
      4 failed pods ──────▶ core.restarts.decide: delete now (re-created next time as run + 1), after
                            the backoff (requeue_after), or fail the job
      5 all trainers done ▶ Succeeded (then 2)
      6 create ───────────▶ NetworkPolicy (network.py: before any pod), Services, PodGroup, pserver
                            pods; trainer pods once every pserver is ready
      7 scale ────────────▶ missing trainers created, surplus deleted highest index first
      8 status ───────────▶ phase + reason + message (why a job waits), counts, conditions

The operator applies the ObjectPlan (``docs/kubernetes.md``: create in order, tolerate 409 / 404, patch
``/status``, post events, handle the finalizer) and calls ``reconcile`` again on any change. Calling
it twice on the same observation gives the same ObjectPlan: decisions taken (a restart) are recorded in
the status it returns, never only in the actions. No clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from paddlecloud.backends.kubernetes import crd, network, pods, status
from paddlecloud.backends.kubernetes.pods import PSERVER, RENDEZVOUS, TRAINER
from paddlecloud.backends.kubernetes.spec import JobView, problems, read_job
from paddlecloud.backends.kubernetes.status import PodView, observe, parse_time, rfc3339
from paddlecloud.core.restarts import Fail, decide

__all__ = ["STOP_PATCH", "Delete", "Event", "ObjectPlan", "reconcile"]

#: merge patch that stops a pod in place (the kubelet kills it with its grace period; the pod and
#: its logs stay): ``spec.activeDeadlineSeconds`` may be set on a running pod, never raised
STOP_PATCH: dict[str, Any] = {"spec": {"activeDeadlineSeconds": status.STOP_DEADLINE}}
_FINISHED = ("Succeeded", "Failed")
_DELETING_RECHECK_S = 2.0

Obj = dict[str, Any]


@dataclass(frozen=True)
class Delete:
    kind: str  # Pod | Service | PodGroup
    name: str
    grace_seconds: int | None = None
    reason: str = ""


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: str
    message: str


@dataclass(frozen=True)
class ObjectPlan:
    create: tuple[Obj, ...] = ()
    delete: tuple[Delete, ...] = ()
    stop: tuple[str, ...] = ()
    status: Obj = field(default_factory=dict)
    events: tuple[Event, ...] = ()
    finalizer: Literal["add", "remove"] | None = None
    delete_job: bool = False
    requeue_after: float | None = None
    trainers_may_start: bool = False


@dataclass
class _Builder:
    """The ObjectPlan being built, and the job's new status."""

    job: JobView
    now: float
    live: list[PodView]  # pods not being deleted
    names: set[str]  # every pod name in use (being deleted included)
    services: set[str]
    podgroups: list[Mapping[str, Any]]
    policies: set[str]
    status: Obj
    create: list[Obj] = field(default_factory=list)
    delete: list[Delete] = field(default_factory=list)
    stop: list[str] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    requeue: list[float] = field(default_factory=list)
    may_start: bool = False
    delete_job: bool = False

    def plan(self, finalizer: Literal["add", "remove"] | None) -> ObjectPlan:
        return ObjectPlan(
            create=tuple(self.create),
            delete=tuple(self.delete),
            stop=tuple(self.stop),
            status=self.status,
            events=tuple(self.events),
            finalizer=finalizer,
            delete_job=self.delete_job,
            requeue_after=min(self.requeue) if self.requeue else None,
            trainers_may_start=self.may_start,
        )

    def current(self, role: str) -> list[PodView]:
        """Live pods of the role's current workers (index below the desired count)."""
        n = {PSERVER: self.job.pserver.replicas, TRAINER: self.job.trainers, RENDEZVOUS: 1}[role]
        return [p for p in self.live if p.role == role and p.index < n]

    def set_phase(self, phase: str, reason: str, message: str) -> None:
        _set_phase(self.status, phase, reason, message, self.now, self.events)


# -- status -----------------------------------------------------------------------------------


def _set_phase(st: Obj, phase: str, reason: str, message: str, now: float, events: list[Event]) -> None:
    """Phase, reason, message and the conditions list (one per phase; the current one True)."""
    changed = (st.get("phase"), st.get("reason")) != (phase, reason)
    st.update(phase=phase, reason=reason, message=message)
    conditions = [dict(c) for c in st.get("conditions") or () if isinstance(c, Mapping)]
    for cond in conditions:
        if cond.get("type") != phase and cond.get("status") == "True":
            cond.update(status="False", lastTransitionTime=rfc3339(now))
    mine = next((cond for cond in conditions if cond.get("type") == phase), None)
    if mine is None:
        mine = {"type": phase}
        conditions.append(mine)
    if mine.get("status") != "True":
        mine["lastTransitionTime"] = rfc3339(now)
    mine.update(status="True", reason=reason, message=message)
    st["conditions"] = conditions
    if changed:
        events.append(Event("Warning" if phase == "Failed" else "Normal", reason, message))


def _base_status(job: JobView, now: float) -> Obj:
    st = dict(job.status)
    st["observedGeneration"] = job.generation
    st["selector"] = f"{crd.LABEL_JOB}={job.name},{crd.LABEL_ROLE}={TRAINER}"
    st.setdefault("restartCount", 0)
    st.setdefault("workerRuns", {})
    st.setdefault("startTime", rfc3339(now))
    return st


def _counts(b: _Builder) -> None:
    b.status["pservers"] = status.counts(b.live, PSERVER, b.job.pserver.replicas)
    b.status["trainers"] = status.counts(b.live, TRAINER, b.job.trainers)


# -- ends: deleting, finishing, failing -------------------------------------------------------


def _delete_everything(b: _Builder, reason: str) -> None:
    for p in sorted(b.live, key=lambda p: (p.role != TRAINER, -p.index)):
        b.delete.append(Delete("Pod", p.name, b.job.grace, reason))
    for name in sorted(b.services):
        b.delete.append(Delete("Service", name, None, reason))
    for pg in b.podgroups:
        b.delete.append(Delete("PodGroup", str(pg["metadata"]["name"]), None, reason))


def _teardown(b: _Builder) -> ObjectPlan:
    """The TrainingJob is being deleted: stop everything, then let it go."""
    _delete_everything(b, "TrainingJobDeleted")
    if b.names:
        b.requeue.append(_DELETING_RECHECK_S)
        return b.plan(None)
    return b.plan("remove" if crd.FINALIZER in b.job.finalizers else None)


def _clean_up(b: _Builder) -> None:
    """A finished job: running pods are stopped (cleanPodPolicy None), or deleted (Running, All)."""
    policy = b.job.clean_pod_policy
    if policy == "All":
        _delete_everything(b, "CleanPodPolicyAll")
        return
    for p in b.live:
        if not p.active:
            continue
        if policy == "Running" or not p.node:  # a pod never bound to a node has no logs to keep
            b.delete.append(Delete("Pod", p.name, b.job.grace, f"CleanPodPolicy{policy}"))
        elif not p.stopped:
            b.stop.append(p.name)


def _ttl(b: _Builder) -> None:
    ttl = b.job.ttl_after_finished
    done = parse_time(b.status.get("completionTime"))
    if ttl is None or done is None:
        return
    left = done + ttl - b.now
    if left <= 0:
        b.delete_job = True
    else:
        b.requeue.append(left)


def _finish(b: _Builder, phase: str, reason: str, message: str) -> None:
    b.status.setdefault("completionTime", rfc3339(b.now))
    b.set_phase(phase, reason, message)
    _counts(b)
    _clean_up(b)
    _ttl(b)


def _deadline_passed(b: _Builder) -> str | None:
    deadline = b.job.active_deadline
    started = parse_time(b.status.get("startTime"))
    if deadline is None or started is None:
        return None
    left = started + deadline - b.now
    if left > 0:
        b.requeue.append(left)
        return None
    return f"the job ran longer than activeDeadlineSeconds ({deadline} s)"


# -- failures and restarts --------------------------------------------------------------------


def _record_failure(b: _Builder, p: PodView) -> None:
    assert p.ended is not None
    last = b.status.get("lastFailure") or {}
    if (last.get("worker"), last.get("run")) == (p.worker, p.run):
        return
    entry: Obj = {"worker": p.worker, "run": p.run, "reason": p.ended.reason, "message": p.ended.message}
    if p.ended.exit.code is not None:
        entry["exitCode"] = p.ended.exit.code
    entry["time"] = rfc3339(p.ended.finished_at or b.now)
    b.status["lastFailure"] = entry


def _describe(p: PodView, message: str) -> str:
    assert p.ended is not None
    where = f" in init container {p.ended.container}" if p.ended.container not in ("", "worker") else ""
    return f"{message} [{p.ended.reason}{where}]"


def _failures(b: _Builder) -> tuple[str, str] | None:
    """Restart failed workers per policy; ``(reason, message)`` when the job must fail instead (then
    no restart of this round is made: the failed pods stay, with their logs)."""
    runs: dict[str, int] = {str(k): int(v) for k, v in (b.status.get("workerRuns") or {}).items()}
    restarts = int(b.status.get("restartCount") or 0)
    failed = [p for role in (PSERVER, RENDEZVOUS, TRAINER) for p in b.current(role) if p.phase == "Failed"]
    deletes: list[Delete] = []
    events: list[Event] = []
    for p in sorted(failed, key=lambda p: (p.role, p.index)):
        assert p.ended is not None
        _record_failure(b, p)
        if runs.get(p.worker, 0) > p.run:  # restart decided earlier; the delete did not happen yet
            deletes.append(Delete("Pod", p.name, 0, "Restart"))
            continue
        d = decide(b.job.rules.policy(p.role), b.job.rules, p.worker, p.ended.exit, restarts, p.run, p.run)
        if isinstance(d, Fail):
            limit = d.message.endswith(f"restart limit {b.job.rules.max_restarts} reached")
            return ("BackoffLimitExceeded" if limit else "WorkerFailed"), _describe(p, d.message)
        wait = (p.ended.finished_at or b.now) + d.delay_s - b.now
        if wait > 0:
            b.requeue.append(wait)
            continue
        runs[p.worker] = d.run
        restarts += 1
        deletes.append(Delete("Pod", p.name, 0, "Restart"))
        events.append(Event("Warning", "WorkerRestarted", _describe(p, d.message)))
    b.status["workerRuns"] = runs
    b.status["restartCount"] = restarts
    b.delete.extend(deletes)
    b.events.extend(events)
    return None


# -- creating and scaling ---------------------------------------------------------------------


def _want(b: _Builder, role: str, index: int) -> None:
    """Create worker ``role-index`` unless a pod by its name exists (or is still being deleted)."""
    name = pods.pod_name(b.job.name, role, index)
    if name in b.names:
        return
    run = int((b.status.get("workerRuns") or {}).get(pods.worker_name(role, index), 0))
    b.create.append(pods.pod(b.job, role, index, run))
    b.names.add(name)


def _servers_ready(b: _Builder) -> bool:
    want = b.job.pserver.replicas + (1 if b.job.elastic_torch else 0)
    ready = [p for role in (PSERVER, RENDEZVOUS) for p in b.current(role) if p.ready]
    return len(ready) >= want


def _create(b: _Builder) -> None:
    job = b.job
    if network.policy_name(job) not in b.policies:  # first: no pod of the job runs unconfined
        b.create.append(network.network_policy(job))
    for svc in pods.services(job):
        if svc["metadata"]["name"] not in b.services:
            b.create.append(svc)
    if job.scheduling.volcano and not b.podgroups:
        b.create.append(pods.podgroup(job))
    for i in range(job.pserver.replicas):
        _want(b, PSERVER, i)
    if job.elastic_torch:
        _want(b, RENDEZVOUS, 0)
    b.may_start = job.scheduling.volcano or _servers_ready(b)
    if b.may_start:
        for i in range(job.trainers):
            _want(b, TRAINER, i)


def _scale_down(b: _Builder) -> None:
    surplus = [p for p in b.live if p.role == TRAINER and p.index >= b.job.trainers]
    for p in sorted(surplus, key=lambda p: -p.index):
        b.delete.append(Delete("Pod", p.name, b.job.grace, "ScaleDown"))
    if surplus:
        n = len(surplus)
        b.events.append(Event("Normal", "ScaleDown", f"removing {n} trainer(s) to {b.job.trainers}"))


# -- phase ------------------------------------------------------------------------------------


def _succeeded(b: _Builder) -> bool:
    done = [p for p in b.current(TRAINER) if p.phase == "Succeeded"]
    return b.job.trainers > 0 and len(done) >= b.job.trainers


def _progress(b: _Builder) -> None:
    """Running once every current worker runs (pservers ready); else Pending / Starting and why."""
    current = [p for role in (PSERVER, RENDEZVOUS, TRAINER) for p in b.current(role)]
    live_names = {p.name for p in current}
    workers = [(PSERVER, i) for i in range(b.job.pserver.replicas)] + [
        (TRAINER, i) for i in range(b.job.trainers)
    ]
    missing = [
        pods.worker_name(r, i) for r, i in workers if pods.pod_name(b.job.name, r, i) not in live_names
    ]
    running = [p for p in current if p.phase in ("Running", "Succeeded") and (p.ready or p.role == TRAINER)]
    if not missing and len(running) == len(current):
        n_ps, n_tr = len(b.current(PSERVER)), len(b.current(TRAINER))
        b.set_phase("Running", "Running", f"{n_ps} pservers and {n_tr} trainers running")
        return
    phase, reason, message = status.waiting([p for p in current if p.phase != "Failed"], b.podgroups, missing)
    restarting = [p.worker for p in current if p.phase == "Failed"]
    if restarting and reason in ("Creating", "ContainerCreating"):
        reason, message = "Restarting", f"restarting {', '.join(restarting)}"
    if b.status.get("phase") == "Running":  # never back from Running: it is running, and this is why not all
        phase = "Running"
    b.set_phase(phase, reason, message)


# -- entry point ------------------------------------------------------------------------------


Objs = Sequence[Mapping[str, Any]]


def _builder(
    job: Mapping[str, Any], pod_objs: Objs, service_objs: Objs, podgroups: Objs, policies: Objs, now: float
) -> _Builder:
    view = read_job(job)

    def mine(obj: Mapping[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        return bool((meta.get("labels") or {}).get(crd.LABEL_JOB) == view.name)

    observed = [v for v in (observe(p) for p in pod_objs if mine(p)) if v is not None]
    return _Builder(
        job=view,
        now=now,
        live=[p for p in observed if not p.deleting],
        names={p.name for p in observed},
        services={str(s["metadata"]["name"]) for s in service_objs if mine(s)},
        podgroups=[g for g in podgroups if mine(g)],
        policies={str(n["metadata"]["name"]) for n in policies if mine(n)},
        status=_base_status(view, now),
    )


def reconcile(
    job: Mapping[str, Any],
    pods_observed: Sequence[Mapping[str, Any]],
    services_observed: Sequence[Mapping[str, Any]],
    now: float,
    podgroups: Sequence[Mapping[str, Any]] = (),
    policies: Sequence[Mapping[str, Any]] = (),
) -> ObjectPlan:
    """What to do about ``job`` given its observed pods, services, PodGroups and NetworkPolicies at
    ``now`` (epoch s)."""
    b = _builder(job, pods_observed, services_observed, podgroups, policies, now)
    if b.job.deleting:
        b.status = dict(b.job.status)
        return _teardown(b)
    finalizer: Literal["add"] | None = None if crd.FINALIZER in b.job.finalizers else "add"
    if b.job.phase in _FINISHED:
        _finish(b, b.job.phase, str(b.status.get("reason") or ""), str(b.status.get("message") or ""))
        return b.plan(finalizer)
    ended = _end_reason(b)
    if ended is not None:
        _finish(b, *ended)
        return b.plan(finalizer)
    _create(b)
    _scale_down(b)
    _counts(b)
    _progress(b)
    if len(b.names) > len({p.name for p in b.live}) + _pods_created(b) or any(
        d.reason == "Restart" for d in b.delete
    ):
        b.requeue.append(_DELETING_RECHECK_S)  # a worker's name is held by a pod being deleted
    return b.plan(finalizer)


def _pods_created(b: _Builder) -> int:
    return sum(1 for o in b.create if o.get("kind") == "Pod")


def _end_reason(b: _Builder) -> tuple[str, str, str] | None:
    """``(phase, reason, message)`` when the job ends in this reconcile."""
    bad = problems(b.job)
    if bad:
        return "Failed", "InvalidSpec", "; ".join(bad)
    late = _deadline_passed(b)
    if late:
        return "Failed", "DeadlineExceeded", late
    failure = _failures(b)
    if failure:
        return "Failed", *failure
    if _succeeded(b):
        return "Succeeded", "Completed", f"all {b.job.trainers} trainers succeeded"
    return None
