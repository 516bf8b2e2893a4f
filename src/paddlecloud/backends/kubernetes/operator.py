"""The TrainingJob operator (kopf): level-based, idempotent reconciliation of every TrainingJob.

    kopf watch: TrainingJob event ─┐
                Pod event (label paddlecloud.org/job) ─┼─▶ Operator.reconcile(ns, name)   (one job at a time)
    resync thread (every resync_s, each job) ──────────┘      LIST its NetworkPolicies, GET TrainingJob,
                                                              LIST its Pods / Services (/ PodGroups)
                                                            objects.reconcile(...) ──▶ ObjectPlan (pure)
                                                            apply(ObjectPlan): finalizer, create, delete,
                                                            stop in place, /status, events, TTL
                requeue_after ──▶ a timer calls reconcile(ns, name) again

Every write that depends on what was read carries the resourceVersion read (finalizers, status); a
409 Conflict runs the whole reconcile again (at most ``CONFLICT_ROUNDS`` times) on a fresh read.
Creating what exists (409) and deleting what is gone (404) are fine: the ObjectPlan is recomputed from what
is observed each time, so applying it twice is harmless. With ``--edl`` the EDL controller
(``edl.py``) runs in a thread beside the handlers. The resync is a thread rather than a kopf timer,
because kopf puts a finalizer of its own on every object a timer watches.

Run: ``python -m paddlecloud.backends.kubernetes.operator --all-namespaces --standalone [--edl]``
(or ``paddlecloud operator ...``); tests build the registry with :func:`registry` and run it under
``kopf.testing.KopfRunner``.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import kopf
from kubernetes import client

from paddlecloud.backends.kubernetes import crd, objects
from paddlecloud.backends.kubernetes import sampleset_crd as ss
from paddlecloud.backends.kubernetes.edl import EdlController
from paddlecloud.backends.kubernetes.kube import Kube, api_message, api_status, connect
from paddlecloud.backends.kubernetes.requeue import Requeue
from paddlecloud.backends.kubernetes.sampleset_operator import SampleSetOperator
from paddlecloud.backends.kubernetes.status import rfc3339

__all__ = ["Operator", "OperatorConfig", "main", "registry"]

log = logging.getLogger("paddlecloud.operator")

Obj = dict[str, Any]
CONFLICT_ROUNDS = 3
#: a failed reconcile is tried again after 1, 2, 4, ... seconds, at most this many
RETRY_BASE_S = 1.0
RETRY_MAX_S = 60.0
_VOLCANO = ("scheduling.volcano.sh", "v1beta1", "podgroups")


@dataclass(frozen=True)
class OperatorConfig:
    #: seconds between resyncs of every TrainingJob (besides watch events)
    resync_s: float = 30.0
    #: run the EDL controller every this many seconds (0: not at all)
    edl_interval_s: float = 0.0
    edl_policy: str = "elastic"
    #: reconcile SampleSets and SampleJobs too (their CRDs: deploy/kubernetes/base/sampleset-crd.yaml)
    samplesets: bool = True


@dataclass
class Operator:
    """Reconciles TrainingJobs with the Kubernetes client; kopf only tells it which one and when."""

    kube: Kube
    clock: Callable[[], float] = time.time
    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)
    #: per job: the last error reported, and how many reconciles failed in a row
    _failed: dict[tuple[str, str], tuple[str, int]] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self._requeue = Requeue(self.handle)

    def reconcile(self, ns: str, name: str) -> objects.ObjectPlan | None:
        """Observe, decide, apply; again on a 409 (bounded). The ObjectPlan applied, or None when the
        TrainingJob is gone."""
        with self._lock(ns, name):
            for attempt in range(CONFLICT_ROUNDS):
                try:
                    return self._round(ns, name)
                except client.ApiException as exc:
                    if api_status(exc) != 409 or attempt == CONFLICT_ROUNDS - 1:
                        raise
                    log.info("conflict reconciling %s/%s; reading it again", ns, name)
        return None  # pragma: no cover

    def handle(self, ns: str, name: str) -> None:
        """Reconcile on a kopf event. A failure is logged, shown on the TrainingJob as a Warning
        event (once per distinct error), so a job never waits without saying why, and retried
        after a backoff that doubles per failure in a row (at most ``RETRY_MAX_S``)."""
        try:
            self.reconcile(ns, name)
        except Exception as exc:
            log.exception("reconciling %s/%s failed", ns, name)
            self._failure(ns, name, f"{api_message(exc)}"[:1024])
            return
        with self._guard:
            self._failed.pop((ns, name), None)

    def _failure(self, ns: str, name: str, text: str) -> None:
        with self._guard:
            last, count = self._failed.get((ns, name), ("", 0))
            self._failed[(ns, name)] = (text, count + 1)
        self._requeue(ns, name, min(RETRY_BASE_S * 2**count, RETRY_MAX_S))
        if text == last:
            return
        try:
            job = self.kube.get_job(ns, name)
        except client.ApiException:
            return
        self.kube.post_event(
            job, "Warning", "ReconcileFailed", text, rfc3339(self.clock()), "paddlecloud-operator"
        )

    def resync(self) -> None:
        """Reconcile every TrainingJob (what a missed watch event would have triggered)."""
        for job in self.kube.list_jobs():
            meta = job.get("metadata") or {}
            self.handle(str(meta.get("namespace")), str(meta.get("name")))

    def close(self) -> None:
        self._requeue.close()

    # -- one round --------------------------------------------------------------------------------

    def _lock(self, ns: str, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault((ns, name), threading.Lock())

    def _round(self, ns: str, name: str) -> objects.ObjectPlan | None:
        selector = f"{crd.LABEL_JOB}={name}"
        # read before the TrainingJob: every call between its GET and the /status PATCH widens the
        # window for a 409 (a policy read a little early is harmless: creating one that exists is fine)
        policies = self.kube.call(self.kube.networking.list_namespaced_network_policy, ns,
                                  label_selector=selector)  # fmt: skip
        try:
            job = self.kube.get_job(ns, name)
        except client.ApiException as exc:
            if api_status(exc) == 404:
                return None
            raise
        pods = self.kube.list_pods(ns, selector)
        services = self.kube.call(self.kube.core.list_namespaced_service, ns, label_selector=selector)
        groups = self._podgroups(job, ns, selector)
        plan = objects.reconcile(
            job, pods, services.get("items") or [], self.clock(), groups, policies.get("items") or []
        )
        self._apply(job, plan)
        return plan

    def _podgroups(self, job: Obj, ns: str, selector: str) -> list[Obj]:
        if ((job.get("spec") or {}).get("scheduling") or {}).get("schedulerName") != "volcano":
            return []
        try:
            out = self.kube.call(self.kube.custom.list_namespaced_custom_object, *_VOLCANO[:2], ns,
                                 _VOLCANO[2], label_selector=selector)  # fmt: skip
        except client.ApiException as exc:
            if api_status(exc) == 404:  # Volcano is not installed
                return []
            raise
        return list(out.get("items") or [])

    def _apply(self, job: Obj, plan: objects.ObjectPlan) -> None:
        meta = job["metadata"]
        ns, name = meta["namespace"], meta["name"]
        if plan.finalizer == "add":
            job = self._finalizers(job, [*(meta.get("finalizers") or []), crd.FINALIZER])
        for obj in plan.create:
            self._create(ns, obj)
        for d in plan.delete:
            self._delete(ns, d)
        for pod in plan.stop:
            self.kube.quietly(self.kube.core.patch_namespaced_pod, pod, ns, objects.STOP_PATCH)
        if plan.status != (job.get("status") or {}):
            job = self._status(job, plan.status)
        for ev in plan.events:
            self._event(job, ev)
        if plan.finalizer == "remove":
            self._finalizers(job, [f for f in meta.get("finalizers") or [] if f != crd.FINALIZER])
        if plan.delete_job:
            self.kube.quietly(self.kube.custom.delete_namespaced_custom_object, crd.GROUP, crd.VERSION, ns,
                          crd.PLURAL, name, propagation_policy="Background")  # fmt: skip
        if plan.requeue_after is not None:
            self._requeue(ns, name, plan.requeue_after)

    def _write(self, fn: Callable[..., Any], *args: Any) -> Obj:
        g, v, p = crd.GROUP, crd.VERSION, crd.PLURAL
        return self.kube.call(fn, g, v, *args[:1], p, *args[1:])

    def _finalizers(self, job: Obj, finalizers: list[str]) -> Obj:
        meta = job["metadata"]
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
        return self._write(
            self.kube.custom.patch_namespaced_custom_object, meta["namespace"], meta["name"], patch
        )

    def _status(self, job: Obj, new: Obj) -> Obj:
        """Replace ``.status`` with ``new`` (keys it drops are removed), conditional on the
        resourceVersion read."""
        meta = job["metadata"]
        status = {**{k: None for k in (job.get("status") or {}) if k not in new}, **new}
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": status}
        fn = self.kube.custom.patch_namespaced_custom_object_status
        return self._write(fn, meta["namespace"], meta["name"], patch)

    def _create(self, ns: str, obj: Obj) -> None:
        kind = obj.get("kind")
        try:
            if kind == "Pod":
                self.kube.call(self.kube.core.create_namespaced_pod, ns, obj)
            elif kind == "Service":
                self.kube.call(self.kube.core.create_namespaced_service, ns, obj)
            elif kind == "NetworkPolicy":
                self.kube.call(self.kube.networking.create_namespaced_network_policy, ns, obj)
            elif kind == "PodGroup":
                self.kube.call(
                    self.kube.custom.create_namespaced_custom_object, *_VOLCANO[:2], ns, _VOLCANO[2], obj
                )
            else:
                log.warning("not creating %s %s: unknown kind", kind, obj["metadata"].get("name"))
        except client.ApiException as exc:
            if api_status(exc) != 409:  # already there: fine
                raise

    def _delete(self, ns: str, d: objects.Delete) -> None:
        if d.kind == "Pod":
            grace = {} if d.grace_seconds is None else {"grace_period_seconds": d.grace_seconds}
            self.kube.quietly(self.kube.core.delete_namespaced_pod, d.name, ns, **grace)
        elif d.kind == "Service":
            self.kube.quietly(self.kube.core.delete_namespaced_service, d.name, ns)
        elif d.kind == "PodGroup":
            self.kube.quietly(
                self.kube.custom.delete_namespaced_custom_object, *_VOLCANO[:2], ns, _VOLCANO[2], d.name
            )

    def _event(self, job: Obj, ev: objects.Event) -> None:
        self.kube.post_event(
            job, ev.type, ev.reason, ev.message, rfc3339(self.clock()), "paddlecloud-operator"
        )


def _connection(kube: Kube) -> kopf.ConnectionInfo:
    """kopf's credentials: the same API server and credentials as the Kubernetes client's."""
    cfg = kube.api.configuration
    auth = str((cfg.api_key or {}).get("authorization") or "")
    scheme, _, token = auth.partition(" ")
    return kopf.ConnectionInfo(
        server=str(cfg.host),
        ca_path=cfg.ssl_ca_cert or None,
        insecure=not cfg.verify_ssl,
        scheme=scheme or None,
        token=token or None,
        certificate_path=cfg.cert_file or None,
        private_key_path=cfg.key_file or None,
    )


def registry(kube: Kube, config: OperatorConfig | None = None) -> kopf.OperatorRegistry:
    """kopf handlers that drive an :class:`Operator` (and, with ``edl_interval_s``, the EDL
    controller) against ``kube``'s API server."""
    config = config or OperatorConfig()
    reg = kopf.OperatorRegistry()
    op = Operator(kube)
    sets = SampleSetOperator(kube)
    loops: list[threading.Event] = []
    group, version, plural = crd.GROUP, crd.VERSION, crd.PLURAL

    @kopf.on.login(registry=reg)
    def login(**_: Any) -> kopf.ConnectionInfo:
        return _connection(kube)

    @kopf.on.startup(registry=reg)
    def startup(settings: kopf.OperatorSettings, **_: Any) -> None:
        settings.posting.level = logging.WARNING
        settings.watching.server_timeout = 60
        settings.watching.client_timeout = 90
        settings.networking.request_timeout = 30
        if config.resync_s > 0:
            loops.append(_every(config.resync_s, "resync", op.resync))
            if config.samplesets:
                loops.append(_every(config.resync_s, "resync-samplesets", sets.resync))
        if config.edl_interval_s > 0:
            edl = EdlController(kube, policy_name=config.edl_policy)
            loops.append(_every(config.edl_interval_s, "edl", edl.step))

    @kopf.on.cleanup(registry=reg)
    def cleanup(**_: Any) -> None:
        for stop in loops:
            stop.set()
        op.close()
        sets.close()

    @kopf.on.event(group, version, plural, registry=reg)
    def job_changed(type: str, namespace: str | None, name: str, **_: Any) -> None:
        if type != "DELETED" and namespace:
            op.handle(namespace, name)

    @kopf.on.event("", "v1", "pods", labels={crd.LABEL_MANAGED_BY: crd.MANAGED_BY}, registry=reg)
    def pod_changed(namespace: str | None, labels: Mapping[str, str], **_: Any) -> None:
        job = labels.get(crd.LABEL_JOB)
        if job and namespace:
            op.handle(namespace, job)

    if config.samplesets:
        _sampleset_handlers(reg, sets)
    return reg


def _sampleset_handlers(reg: kopf.OperatorRegistry, sets: SampleSetOperator) -> None:
    """SampleSets are reconciled on their own events, their SampleJobs', Jobs' and claim's."""
    group, version = crd.GROUP, crd.VERSION

    @kopf.on.event(group, version, ss.SET_PLURAL, registry=reg)
    def sampleset_changed(type: str, namespace: str | None, name: str, **_: Any) -> None:
        if type != "DELETED" and namespace:
            sets.handle(namespace, name)

    @kopf.on.event(group, version, ss.JOB_PLURAL, registry=reg)
    def samplejob_changed(namespace: str | None, spec: Mapping[str, Any], **_: Any) -> None:
        if namespace and spec.get("sampleSet"):
            sets.handle(namespace, str(spec["sampleSet"]))

    @kopf.on.event("batch", "v1", "jobs", labels={ss.LABEL_SAMPLESET: kopf.PRESENT}, registry=reg)
    def job_changed(namespace: str | None, labels: Mapping[str, str], **_: Any) -> None:
        if namespace:
            sets.handle(namespace, labels[ss.LABEL_SAMPLESET])

    @kopf.on.event(
        "", "v1", "persistentvolumeclaims", labels={ss.LABEL_SAMPLESET: kopf.PRESENT}, registry=reg
    )
    def claim_changed(namespace: str | None, labels: Mapping[str, str], **_: Any) -> None:
        if namespace:  # bound: the SampleSet is Ready
            sets.handle(namespace, labels[ss.LABEL_SAMPLESET])


def _every(interval_s: float, name: str, fn: Callable[[], object]) -> threading.Event:
    """Call ``fn`` every ``interval_s`` seconds in a thread until the returned event is set."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(interval_s):
            try:
                fn()
            except Exception:
                log.exception("%s round failed", name)

    threading.Thread(target=loop, name=name, daemon=True).start()
    return stop


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="paddlecloud operator", description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("-A", "--all-namespaces", action="store_true", help="watch every namespace (default)")
    where.add_argument(
        "-n", "--namespace", action="append", default=[], help="watch this namespace (repeatable)"
    )
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: the pod's service account)")
    parser.add_argument("--standalone", action="store_true", help="no peering with other operators")
    parser.add_argument("--edl", action="store_true", help="also run the EDL controller")
    parser.add_argument("--edl-interval", type=float, default=10.0, help="seconds between EDL rounds")
    parser.add_argument("--resync", type=float, default=30.0, help="seconds between resyncs of each job")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    kopf.configure(verbose=args.verbose)
    kube = connect(args.kubeconfig, agent="paddlecloud-operator")
    config = OperatorConfig(resync_s=args.resync, edl_interval_s=args.edl_interval if args.edl else 0.0)
    kopf.run(
        registry=registry(kube, config),
        standalone=args.standalone,
        clusterwide=not args.namespace,
        namespaces=args.namespace,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
