"""The API server's Kubernetes backend: each admitted job is a TrainingJob the operator runs as Pods.

    start(launch) ──▶ [namespace paddlecloud-<user>] ──▶ create TrainingJob (launch.training_job)
                  ──▶ Secret <tj>-job-token owned by it (PADDLECLOUD_JOB_TOKEN and, for elastic
                      torch, PADDLECLOUD_RDZV_KEY in the pods; kept when the job is re-adopted)
    sync(key)     ◀── GET TrainingJob + LIST Pods (label paddlecloud.org/job) ──report()──▶ JobStatus
    add_trainer / remove_trainer ──▶ PATCH trainingjobs/scale (resourceVersion precondition, 409 retried)
    stop(key)     ──▶ DELETE TrainingJob (the operator's finalizer deletes the pods with the grace);
                      waits until they are gone, at most grace + a margin, then deletes what is left
    read_log      ──▶ pods/log (logs.py);   nodes ──▶ Nodes' allocatable cpu, memory, nvidia.com/gpu

The operator (``operator.py``) does the rest: pserver pods first, trainers once pservers are ready,
restarts per policy, status. A job's earlier TrainingJob of the same name that is still being
deleted (a preempted job started again) delays the creation to a later ``sync``. Capabilities:
GPUs (requested as ``nvidia.com/gpu``; the device plugin assigns them), resize (the scale
subresource), adopt (jobs live in the cluster) and log follow; not ``logs-previous``: a restarted
worker's pod is re-created, so only the tail of its failed run is kept (``logs.py``). SampleSets:
``samplesets`` writes SampleSet / SampleJob custom resources (``sampleset_backend.py``), and a job
with ``launch.sampleset`` names it in its TrainingJob (the operator mounts it in the pods).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client
from urllib3.exceptions import HTTPError

from paddlecloud.backends.base import (
    BackendEvent,
    BackendSetup,
    Capability,
    Confinement,
    JobLaunch,
    JobStatus,
    LogRequest,
    NodeInfo,
)
from paddlecloud.backends.errors import JobRejected, NotSupported
from paddlecloud.backends.kubernetes import crd
from paddlecloud.backends.kubernetes.kube import (
    Kube,
    api_message,
    api_status,
    backend_error,
    connect,
    retry_conflict,
)
from paddlecloud.backends.kubernetes.launch import (
    ANNOTATION_ATTEMPT,
    ANNOTATION_KEY,
    placed,
    pull_secret,
    token_secret,
    training_job,
)
from paddlecloud.backends.kubernetes.logs import LogSource, read_logs
from paddlecloud.backends.kubernetes.pods import namespace as job_namespace
from paddlecloud.backends.kubernetes.quantities import node_info
from paddlecloud.backends.kubernetes.report import Seen, report
from paddlecloud.backends.kubernetes.sampleset_backend import KubeSampleSets
from paddlecloud.backends.kubernetes.settings import KubeSettings
from paddlecloud.core.envcontract import new_rendezvous_key
from paddlecloud.scheduler import WorkerPlacement

__all__ = ["KubernetesBackend", "create"]

log = logging.getLogger("paddlecloud.backends.kubernetes")

Obj = dict[str, Any]
_API_ERRORS = (client.ApiException, HTTPError, OSError)
_STOP_MARGIN_S = 5.0
_POLL_S = 0.2


@dataclass
class _Job:
    launch: JobLaunch
    namespace: str
    name: str
    created: bool = False
    stopping: bool = False
    seen: Seen = field(default_factory=Seen)
    events: list[BackendEvent] = field(default_factory=list)
    unreachable: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take_events(self) -> tuple[BackendEvent, ...]:
        out, self.events = tuple(self.events), []
        return out


class KubernetesBackend:
    name = "kubernetes"
    #: fetch-package: the pods' fetch init container GETs the package (the TrainingJob names its
    #: PFS path and the API; ``pods._package_url``) with the job token from the job's Secret.
    #: logs-previous: the container's previous log when the kubelet restarted it in place (a pod
    #: made anew by the operator has none: an empty answer). images: the pods run the job's image
    #: (``JobLaunch.image``; the server's ``--image`` for a job without one), its requirements
    #: installed at start by the install init container as for any job
    capabilities = frozenset(
        {
            Capability.GPU,
            Capability.RESIZE,
            Capability.ADOPT,
            Capability.LOGS_FOLLOW,
            Capability.LOGS_PREVIOUS,
            Capability.SAMPLESETS,
            Capability.IMAGES,
        }
    )

    def __init__(
        self,
        settings: KubeSettings,
        datacenter: str = "local",
        wake: Callable[[], None] = lambda: None,
        kube: Kube | None = None,
        data_dir: Path | None = None,
    ) -> None:
        self.settings = settings
        self.datacenter = datacenter
        self._wake = wake
        self.kube = kube or connect(settings.kubeconfig, settings.request_timeout_s, "paddlecloud-server")
        self._jobs: dict[str, _Job] = {}
        self._lock = threading.Lock()
        self._nodes: tuple[float, tuple[NodeInfo, ...]] = (float("-inf"), ())
        #: SampleSets as custom resources the operator reconciles (``sampleset_backend``)
        self.samplesets = KubeSampleSets(self.kube, settings, data_dir)

    # -- contract -------------------------------------------------------------------------------

    def nodes(self) -> tuple[NodeInfo, ...]:
        at, cached = self._nodes
        if time.monotonic() - at < self.settings.nodes_ttl_s:
            return cached
        try:
            items = self.kube.call(self.kube.core.list_node).get("items") or []
        except _API_ERRORS as exc:
            log.warning("listing nodes failed: %s", exc)
            return cached
        found = tuple(n for n in (node_info(o) for o in items) if n is not None)
        self._nodes = (time.monotonic(), found)
        return found

    def start(self, launch: JobLaunch) -> None:
        ns, name = placed(self.settings, launch)  # ValueError: the job fails to start, with why
        job = _Job(launch, ns, name)
        with self._lock:
            self._jobs[launch.key] = job
        try:
            if self.settings.namespace is None:
                self._ensure_namespace(ns)
            with job.lock:
                self._create(job)
        except _API_ERRORS as exc:  # the job fails to start with what Kubernetes said, or waits
            raise backend_error(exc, f"creating TrainingJob {ns}/{name}") from None

    def adopt(self, launch: JobLaunch) -> None:
        ns, name = placed(self.settings, launch)
        job = _Job(launch, ns, name)
        with self._lock:
            self._jobs[launch.key] = job
        with job.lock:
            try:
                tj = self.kube.get_job(ns, name)
            except _API_ERRORS as exc:
                if api_status(exc) != 404:
                    raise backend_error(exc, f"reading TrainingJob {ns}/{name}") from None
                self._create_or_raise(job)  # gone while the server was down: start it again
                return
            job.created = self._ours(job, tj)
            runs = (tj.get("status") or {}).get("workerRuns") or {}
            job.seen.runs = {str(k): int(v) for k, v in runs.items()}  # restarts already reported
            if not job.created:
                self._create_or_raise(job)

    def sync(self, key: str) -> JobStatus:
        job = self._get(key)
        if job is None:
            return JobStatus(failure="the backend has no record of this job", finished=True)
        with job.lock:
            try:
                return self._sync(job)
            except _API_ERRORS as exc:
                if not job.unreachable:
                    job.unreachable = True
                    message = f"reading the job failed: {api_message(exc)}"
                    job.events.append(BackendEvent("Warning", "KubernetesUnreachable", message))
                return JobStatus(workers=tuple(job.seen.workers.values()), events=job.take_events())

    def stop(self, key: str, grace: float) -> None:
        job = self._get(key)
        if job is None:
            return
        with job.lock:
            job.stopping = True
        self._delete_job(job, grace)
        deadline = time.monotonic() + grace + _STOP_MARGIN_S
        while self._alive_pods(job) and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        left = self._alive_pods(job)
        for pod in left:  # the operator did not get to them in time: SIGKILL
            self._ignore_404(self.kube.core.delete_namespaced_pod, pod, job.namespace, grace_period_seconds=0)

    def add_trainer(self, key: str, placement: WorkerPlacement) -> None:
        job = self._get(key)
        if placement.role != "trainer":
            raise NotSupported(self.name, f"adding a {placement.role} to a running job")
        if job is None:
            raise JobRejected(f"cannot add trainer-{placement.index} to {key}: no such job here")
        try:
            self._scale(job, lambda n: max(n, placement.index + 1), "TrainerAdded")
        except _API_ERRORS as exc:
            raise backend_error(exc, f"scaling TrainingJob {job.namespace}/{job.name}") from None

    def remove_trainer(self, key: str, grace: float) -> None:
        job = self._get(key)
        if job is None:
            return
        lo = job.launch.trainer_range[0] if job.launch.trainer_range else 1
        try:
            self._scale(job, lambda n: n - 1 if n > max(lo, 1) else n, "TrainerRemoved")
        except _API_ERRORS as exc:  # the contract: retiring never raises; the job keeps its trainers
            with job.lock:
                job.events.append(
                    BackendEvent("Warning", "ResizeFailed", f"removing a trainer: {api_message(exc)}")
                )

    def read_log(self, req: LogRequest) -> Iterator[bytes]:
        job = self._get(req.key)
        if job is None:
            return iter(())
        src = LogSource(self.kube, job.namespace, job.name, wait_s=self.settings.follow_wait_s)
        return read_logs(src, req)

    def disk_usage(self, key: str) -> Iterator[int]:
        """Not declared (no ``disk-usage``): a pod's files outside PFS (its workspace emptyDir, its
        writable layer) are the kubelet's, on the node, and end with the pod; they count in no
        quota here (docs/pfs.md, docs/kubernetes.md)."""
        raise NotSupported(self.name, "measuring a job's own folders (pods' storage is the kubelet's)")

    def forget(self, key: str) -> None:
        with self._lock:
            job = self._jobs.pop(key, None)
        if job is not None:
            self._delete_job(job, 0)

    def confinement(self) -> Confinement:
        return Confinement(
            "Kubernetes pods: no service-account token, PFS through per-user subPaths (home read-write, "
            "public read-only), non-root, no privilege escalation, no capabilities, seccomp RuntimeDefault",
            True,
        )

    def close(self) -> None:
        self.kube.api.close()  # type: ignore[no-untyped-call]

    # -- internals ------------------------------------------------------------------------------

    def _get(self, key: str) -> _Job | None:
        with self._lock:
            return self._jobs.get(key)

    def _ignore_404(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj | None:
        try:
            return self.kube.call(fn, *args, **kwargs)
        except client.ApiException as exc:
            if api_status(exc) != 404:
                raise
            return None

    def _ensure_namespace(self, ns: str) -> None:
        try:
            self.kube.call(self.kube.core.create_namespace, job_namespace(ns))
        except client.ApiException as exc:
            if api_status(exc) != 409:
                raise

    @staticmethod
    def _ours(job: _Job, tj: Obj) -> bool:
        notes = (tj.get("metadata") or {}).get("annotations") or {}
        return (
            notes.get(ANNOTATION_KEY) == job.launch.key
            and notes.get(ANNOTATION_ATTEMPT) == str(job.launch.attempt)
            and not (tj.get("metadata") or {}).get("deletionTimestamp")
        )

    def _create_or_raise(self, job: _Job) -> None:
        try:
            self._create(job)
        except _API_ERRORS as exc:
            raise backend_error(exc, f"creating TrainingJob {job.namespace}/{job.name}") from None

    def _create(self, job: _Job) -> None:
        """Create the TrainingJob and its token Secret, unless an older one of the same name is in
        the way (then it is deleted, and a later ``sync`` tries again)."""
        body = training_job(job.launch, self.settings, self.datacenter)
        g, v, p = crd.GROUP, crd.VERSION, crd.PLURAL
        try:
            tj = self.kube.call(
                self.kube.custom.create_namespaced_custom_object, g, v, job.namespace, p, body
            )
        except client.ApiException as exc:
            if api_status(exc) != 409:
                raise
            tj = self.kube.get_job(job.namespace, job.name)
            if not self._ours(job, tj):
                self._make_way(job, tj)
                return
        self._secret(job, tj)
        job.created = True
        job.events.append(
            BackendEvent("Normal", "Created", f"TrainingJob {job.namespace}/{job.name} created")
        )

    def _make_way(self, job: _Job, tj: Obj) -> None:
        if not (tj.get("metadata") or {}).get("deletionTimestamp"):
            delete = self.kube.custom.delete_namespaced_custom_object
            g, v, p = crd.GROUP, crd.VERSION, crd.PLURAL
            self._ignore_404(delete, g, v, job.namespace, p, job.name, propagation_policy="Background")
        message = f"waiting for an earlier TrainingJob {job.namespace}/{job.name} to be deleted"
        if not any(e.message == message for e in job.events):
            job.events.append(BackendEvent("Normal", "WaitingForCleanup", message))

    def _pull_secret(self, job: _Job, tj: Obj) -> None:
        """The owner's registry login as the pods' pull secret (made anew: a login may have changed)."""
        body = pull_secret(job.launch, tj)
        if body is None:
            return
        try:
            self.kube.call(self.kube.core.create_namespaced_secret, job.namespace, body)
        except client.ApiException as exc:
            if api_status(exc) != 409:
                raise
            patch = {
                "metadata": {"ownerReferences": body["metadata"]["ownerReferences"]},
                "data": body["data"],
            }
            self.kube.call(
                self.kube.core.patch_namespaced_secret, body["metadata"]["name"], job.namespace, patch
            )

    def _secret(self, job: _Job, tj: Obj) -> None:
        self._pull_secret(job, tj)
        body = token_secret(job.launch, tj, new_rendezvous_key())
        name = body["metadata"]["name"]
        try:
            self.kube.call(self.kube.core.create_namespaced_secret, job.namespace, body)
        except client.ApiException as exc:
            if api_status(exc) != 409:
                raise
            # There already (an earlier try whose answer was lost, pods may have started with it, or
            # an earlier job's, about to be collected): the token is this start's, the rendezvous
            # key stays the one the pods may hold
            data = dict(body["data"])
            old = self.kube.call(self.kube.core.read_namespaced_secret, name, job.namespace)
            if (old.get("data") or {}).get(crd.SECRET_RENDEZVOUS_KEY):
                del data[crd.SECRET_RENDEZVOUS_KEY]
            patch = {"metadata": {"ownerReferences": body["metadata"]["ownerReferences"]}, "data": data}
            self.kube.call(self.kube.core.patch_namespaced_secret, name, job.namespace, patch)

    def _sync(self, job: _Job) -> JobStatus:
        if not job.created and not job.stopping:
            tj = self._ignore_404(self.kube.custom.get_namespaced_custom_object, crd.GROUP, crd.VERSION,
                                  job.namespace, crd.PLURAL, job.name)  # fmt: skip
            if tj is not None and not self._ours(job, tj):
                self._make_way(job, tj)
                return JobStatus(events=job.take_events())
            self._create(job)
        tj = self._ignore_404(self.kube.custom.get_namespaced_custom_object, crd.GROUP, crd.VERSION,
                              job.namespace, crd.PLURAL, job.name)  # fmt: skip
        if tj is not None and not self._ours(job, tj) and not job.stopping:
            tj = None
        pods = self.kube.list_pods(job.namespace, f"{crd.LABEL_JOB}={job.name}")
        job.unreachable = False
        status = report(tj, pods, job.seen, job.stopping)
        failure = status.failure
        if tj is None and not job.stopping:
            failure = f"its TrainingJob {job.namespace}/{job.name} was deleted outside the platform"
        return JobStatus(
            workers=status.workers,
            failure=failure,
            finished=status.finished,
            events=(*job.take_events(), *status.events),
        )

    def _delete_job(self, job: _Job, grace: float) -> None:
        g, v, p, ns = crd.GROUP, crd.VERSION, crd.PLURAL, job.namespace
        try:
            patch = {
                "spec": {"terminationGracePeriodSeconds": int(grace)}
            }  # the pods' grace, for the operator
            self._ignore_404(self.kube.custom.patch_namespaced_custom_object, g, v, ns, p, job.name, patch)
            self._ignore_404(self.kube.custom.delete_namespaced_custom_object, g, v, ns, p, job.name,
                             propagation_policy="Background")  # fmt: skip
        except _API_ERRORS as exc:
            log.warning("deleting TrainingJob %s/%s failed: %s", ns, job.name, exc)

    def _alive_pods(self, job: _Job) -> list[str]:
        try:
            pods = self.kube.list_pods(job.namespace, f"{crd.LABEL_JOB}={job.name}")
        except _API_ERRORS:
            return []
        return [
            str(p["metadata"]["name"])
            for p in pods
            if (p.get("status") or {}).get("phase", "Pending") in ("Pending", "Running", "Unknown")
        ]

    def _scale(self, job: _Job, change: Callable[[int], int], reason: str) -> None:
        """Set the trainer count through the scale subresource: read, change, write with the
        resourceVersion read (409: again, bounded)."""

        def attempt() -> tuple[int, int]:
            scale = self.kube.get_scale(job.namespace, job.name)
            have = int((scale.get("spec") or {}).get("replicas") or 0)
            want = change(have)
            if want != have:
                rv = scale["metadata"]["resourceVersion"]
                self.kube.patch_scale(
                    job.namespace, job.name, {"metadata": {"resourceVersion": rv}, "spec": {"replicas": want}}
                )
            return have, want

        have, want = retry_conflict(attempt)
        if want != have:
            with job.lock:
                job.events.append(
                    BackendEvent("Normal", reason, f"trainers {have} -> {want} (scale subresource)")
                )
            self._wake()


def create(setup: BackendSetup) -> KubernetesBackend:
    """The registry's factory: a Kubernetes backend from :class:`KubeSettings` (``backends.registry``)."""
    settings: KubeSettings = setup.settings
    return KubernetesBackend(settings, setup.datacenter, setup.wake, data_dir=setup.data_dir)
