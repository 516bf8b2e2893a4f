"""What observed Pods say: each one read into a :class:`PodView`, per-role counts, and why a job waits.

    Pod dicts ──observe()──▶ PodView (role, index, run, phase, ready, how it ended, why it waits)
    PodViews ──counts()────▶ status.pservers / status.trainers
    PodViews, PodGroups ──waiting()──▶ (phase, reason, message): Pending or Starting, and why
    Pod status ──oom_reason()──▶ "OOMKilled" when a container went over its memory limit
    Pod dict ───oom_message()──▶ which container, and its limit, in words

A job that waits always says why, in the words Kubernetes used: the scheduler's ``PodScheduled``
message ("0/3 nodes are available: 3 Insufficient nvidia.com/gpu."), a waiting container's reason
(``ImagePullBackOff``), Volcano's PodGroup condition, or the init step under way. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from paddlecloud.backends.kubernetes import crd
from paddlecloud.backends.kubernetes.pods import PSERVER, RENDEZVOUS, TRAINER, worker_name
from paddlecloud.core.restarts import Exit

__all__ = [
    "OOM_KILLED",
    "STOP_DEADLINE",
    "Ended",
    "PodView",
    "counts",
    "observe",
    "oom_message",
    "oom_reason",
    "parse_time",
    "rfc3339",
    "waiting",
]

_INIT_STEPS = {
    "fetch": "fetching the job package",
    "install": "installing requirements.txt",
    "wait": "waiting for the pservers to accept connections",
}
_MESSAGE_MAX = 1024
#: ``spec.activeDeadlineSeconds`` the platform sets to stop a pod in place (``objects.STOP_PATCH``)
STOP_DEADLINE = 1
#: the kubelet's termination reason of a container the kernel killed at its memory limit
OOM_KILLED = "OOMKilled"


def rfc3339(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: object) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True)
class Ended:
    """How a failed pod ended: the exit for ``core.restarts.decide`` and the words for people."""

    exit: Exit
    reason: str  # the container's (or pod's) termination reason: Error, OOMKilled, Evicted, ...
    message: str  # the termination message (the log's tail with FallbackToLogsOnError)
    finished_at: float | None
    container: str  # which container failed: fetch / install / wait / worker; "" for the pod


@dataclass(frozen=True)
class PodView:
    name: str
    role: str
    index: int
    run: int
    phase: str  # Pending | Running | Succeeded | Failed | Unknown
    ready: bool
    deleting: bool
    #: why the pod is not on a node yet: (reason, message), e.g. ("Unschedulable", "0/3 nodes ...")
    unscheduled: tuple[str, str] | None
    #: a container stuck waiting: (reason, message), e.g. ("ImagePullBackOff", "Back-off pulling ...")
    stuck: tuple[str, str] | None
    init_step: str  # the init container running now ("" when none)
    ended: Ended | None  # set when phase is Failed
    node: str = ""  # spec.nodeName: "" until the scheduler bound the pod
    stopped: bool = False  # stopped in place (spec.activeDeadlineSeconds set by the platform)

    @property
    def worker(self) -> str:
        return worker_name(self.role, self.index)

    @property
    def active(self) -> bool:
        return self.phase in ("Pending", "Running", "Unknown") and not self.deleting


def _map(d: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = d.get(key)
    return dict(value) if isinstance(value, Mapping) else {}


def _condition(status: Mapping[str, Any], type_: str) -> dict[str, Any]:
    for cond in status.get("conditions") or ():
        if isinstance(cond, Mapping) and cond.get("type") == type_:
            return dict(cond)
    return {}


def _short(text: str) -> str:
    text = text.strip()
    return text if len(text) <= _MESSAGE_MAX else "..." + text[-_MESSAGE_MAX:]


def _terminated(cs: Mapping[str, Any]) -> dict[str, Any]:
    return _map(_map(cs, "state"), "terminated")


def _ended(status: Mapping[str, Any]) -> Ended:
    """The first failed init container, else the worker container, else the pod's own reason."""
    statuses = [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]
    for cs in statuses:
        term = _terminated(cs)
        if term and int(term.get("exitCode") or 0) != 0:
            code = int(term["exitCode"])
            sig = term.get("signal")
            return Ended(
                exit=Exit(code=code, signal=int(sig) if sig else None),
                reason=str(term.get("reason") or "Error"),
                message=_short(str(term.get("message") or "")),
                finished_at=parse_time(term.get("finishedAt")),
                container=str(cs.get("name") or ""),
            )
    # Evicted, node lost, deadline: no exit status; the pod vanished as far as its program goes
    return Ended(
        exit=Exit(code=None),
        reason=str(status.get("reason") or "Lost"),
        message=_short(str(status.get("message") or "the pod failed without an exit status")),
        finished_at=None,
        container="",
    )


def _oom_killed(status: Mapping[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The name and ``terminated`` state of the first container (init containers first) whose
    current or last run was OOM-killed."""
    for cs in [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]:
        if not isinstance(cs, Mapping):
            continue
        for key in ("state", "lastState"):
            term = _map(_map(cs, key), "terminated")
            if term.get("reason") == OOM_KILLED:
                return str(cs.get("name") or ""), term
    return None


def oom_reason(pod_status: Mapping[str, Any]) -> str | None:
    """``"OOMKilled"`` when a container of the pod (an init container too: ``install`` runs pip) was
    killed by the kernel for going over its memory limit, else None. ``pod_status``: a Pod's
    ``.status``. Worker containers have memory limit = request (``pods.guaranteed``), so this is
    the worker outgrowing its ``--memory``."""
    return OOM_KILLED if _oom_killed(pod_status) is not None else None


def oom_message(pod: Mapping[str, Any]) -> str | None:
    """What :func:`oom_reason` found, for people: ``"container worker went over its memory limit
    (1Gi) and was killed (exit code 137)"``; None when no container was OOM-killed."""
    found = _oom_killed(_map(pod, "status"))
    if found is None:
        return None
    name, term = found
    spec = _map(pod, "spec")
    limit = next(
        (
            _map(_map(c, "resources"), "limits").get("memory")
            for c in [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
            if isinstance(c, Mapping) and c.get("name") == name
        ),
        None,
    )
    code = term.get("exitCode")
    return (
        f"container {name} went over its memory limit{f' ({limit})' if limit else ''} and was killed"
        f"{f' (exit code {code})' if code is not None else ''}"
    )


def _stuck(status: Mapping[str, Any]) -> tuple[str, str] | None:
    statuses = [*(status.get("initContainerStatuses") or ()), *(status.get("containerStatuses") or ())]
    for cs in statuses:
        waiting = _map(_map(cs, "state"), "waiting")
        reason = str(waiting.get("reason") or "")
        if reason and reason not in ("PodInitializing", "ContainerCreating"):
            return reason, f"{cs.get('name')}: {waiting.get('message') or reason}"
    return None


def _init_step(status: Mapping[str, Any]) -> str:
    for cs in status.get("initContainerStatuses") or ():
        if "running" in _map(cs, "state"):
            return str(cs.get("name") or "")
    return ""


def _unscheduled(status: Mapping[str, Any]) -> tuple[str, str] | None:
    cond = _condition(status, "PodScheduled")
    if cond.get("status") == "False":
        return str(cond.get("reason") or "Unschedulable"), str(cond.get("message") or "not scheduled yet")
    return None


def observe(pod: Mapping[str, Any]) -> PodView | None:
    """Read one pod; None when it is not a worker pod of a TrainingJob (labels missing)."""
    meta = _map(pod, "metadata")
    lbls = _map(meta, "labels")
    role = lbls.get(crd.LABEL_ROLE)
    if role not in (PSERVER, TRAINER, RENDEZVOUS):
        return None
    try:
        index, run = int(lbls.get(crd.LABEL_INDEX, 0)), int(lbls.get(crd.LABEL_RUN, 0))
    except ValueError:
        return None
    status = _map(pod, "status")
    phase = str(status.get("phase") or "Pending")
    return PodView(
        name=str(meta.get("name") or ""),
        role=str(role),
        index=index,
        run=run,
        phase=phase,
        ready=phase == "Running" and _condition(status, "Ready").get("status") == "True",
        deleting=bool(meta.get("deletionTimestamp")),
        unscheduled=_unscheduled(status) if phase == "Pending" else None,
        stuck=_stuck(status) if phase == "Pending" else None,
        init_step=_init_step(status) if phase == "Pending" else "",
        ended=_ended(status) if phase == "Failed" else None,
        node=str(_map(pod, "spec").get("nodeName") or ""),
        stopped=_map(pod, "spec").get("activeDeadlineSeconds") == STOP_DEADLINE,
    )


def counts(pods: Iterable[PodView], role: str, desired: int) -> dict[str, int]:
    """``status.<role>s``: pods of the current workers (index below ``desired``)."""
    mine = [p for p in pods if p.role == role and p.index < desired and not p.deleting]
    return {
        "desired": desired,
        "active": sum(1 for p in mine if p.active),
        "ready": sum(1 for p in mine if p.ready or (p.phase == "Running" and role == TRAINER)),
        "succeeded": sum(1 for p in mine if p.phase == "Succeeded"),
        "failed": sum(1 for p in mine if p.phase == "Failed" and not p.stopped),  # stopped: not failed
    }


def _podgroup_waiting(podgroups: Sequence[Mapping[str, Any]]) -> tuple[str, str] | None:
    for pg in podgroups:
        status = _map(pg, "status")
        if status.get("phase") in ("Running", "Completed"):
            continue
        for cond in status.get("conditions") or ():
            if (
                isinstance(cond, Mapping)
                and cond.get("type") == "Unschedulable"
                and cond.get("status") == "True"
            ):
                return (
                    "PodGroupPending",
                    f"PodGroup {_map(pg, 'metadata').get('name')}: {cond.get('message')}",
                )
    return None


def waiting(
    pods: Sequence[PodView], podgroups: Sequence[Mapping[str, Any]], missing: Sequence[str]
) -> tuple[str, str, str]:
    """Why a started job is not Running yet: ``(phase, reason, message)``.

    ``pods``: the current workers' live pods; ``missing``: workers whose pods are not created yet
    (trainers held back until the pservers are ready)."""
    if not pods:
        return "Pending", "Creating", "creating the job's pods"
    gang = _podgroup_waiting(podgroups)
    if gang:
        return "Pending", *gang
    for p in pods:
        if p.unscheduled:
            reason, message = p.unscheduled
            return "Pending", reason, f"{p.worker}: {message}"
    for p in pods:
        if p.stuck:
            reason, message = p.stuck
            return "Starting", reason, f"{p.worker}: {message}"
    servers = [p for p in pods if p.role in (PSERVER, RENDEZVOUS)]
    for p in servers:
        if p.init_step:
            return "Starting", "Initializing", f"{p.worker}: {_INIT_STEPS.get(p.init_step, p.init_step)}"
    not_ready = [p.worker for p in servers if not p.ready]
    if not_ready:
        ready = len(servers) - len(not_ready)
        names = ", ".join(not_ready)
        return (
            "Starting",
            "WaitingForPservers",
            f"waiting for {names} to be ready ({ready} of {len(servers)} ready)",
        )
    for p in pods:
        if p.init_step:
            return "Starting", "Initializing", f"{p.worker}: {_INIT_STEPS.get(p.init_step, p.init_step)}"
    pending = [p.worker for p in pods if p.phase != "Running"] + list(missing)
    return "Starting", "ContainerCreating", f"starting {', '.join(pending)}" if pending else "starting"
