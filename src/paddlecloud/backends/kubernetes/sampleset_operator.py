"""The operator's SampleSet part: observe one SampleSet, reconcile it (pure), apply the plan.

    kopf: SampleSet event ──────────────────┐
          SampleJob event (spec.sampleSet) ─┼─▶ SampleSetOperator.handle(ns, name)  (one set at a time)
          Job / PVC event (label sampleset) ┘      GET SampleSet, LIST its SampleJobs, Jobs, Pods,
                                                   GET its PV and PVC, LIST Nodes
                                                   sampleset_objects.reconcile ──▶ SetPlan
                                                   apply: finalizer, create, delete, node labels,
                                                   SampleJob /status, SampleSet /status, requeue

Writes that depend on what was read carry its resourceVersion; a 409 runs the round again on a
fresh read (bounded). Creating what exists (409) and deleting what is gone (404) are fine.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from paddlecloud.backends.kubernetes import crd
from paddlecloud.backends.kubernetes import sampleset_crd as ss
from paddlecloud.backends.kubernetes.kube import Kube, api_status, retry_conflict
from paddlecloud.backends.kubernetes.requeue import Requeue
from paddlecloud.backends.kubernetes.sampleset_objects import Observed, SetPlan, reconcile

__all__ = ["SampleSetOperator"]

log = logging.getLogger("paddlecloud.operator.samplesets")

Obj = dict[str, Any]
CONFLICT_ROUNDS = 3
RETRY_S = 2.0


@dataclass
class SampleSetOperator:
    kube: Kube
    clock: Callable[[], float] = time.time
    _locks: dict[tuple[str, str], threading.Lock] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.batch = client.BatchV1Api(self.kube.api)
        self._requeue = Requeue(self.handle)

    def handle(self, ns: str, name: str) -> None:
        """Reconcile on an event; a failure is logged and tried again after a pause."""
        try:
            self.reconcile(ns, name)
        except Exception:
            log.exception("reconciling SampleSet %s/%s failed", ns, name)
            self._requeue(ns, name, RETRY_S)

    def reconcile(self, ns: str, name: str) -> SetPlan | None:
        with self._guard:
            lock = self._locks.setdefault((ns, name), threading.Lock())
        with lock:  # a 409: the whole round again on a fresh read (bounded)
            return retry_conflict(lambda: self._round(ns, name), CONFLICT_ROUNDS)

    def resync(self) -> None:
        """Reconcile every SampleSet (what a missed watch event would have triggered); nothing
        while the CRDs are not installed."""
        k = self.kube
        listed = self._get(k.custom.list_cluster_custom_object, crd.GROUP, crd.VERSION, ss.SET_PLURAL)
        for item in (listed or {}).get("items") or []:
            meta = item.get("metadata") or {}
            self.handle(str(meta.get("namespace")), str(meta.get("name")))

    def close(self) -> None:
        self._requeue.close()

    # -- one round --------------------------------------------------------------------------------

    def _get(self, fn: Callable[..., Any], *args: Any) -> Obj | None:
        try:
            return self.kube.call(fn, *args)
        except client.ApiException as exc:
            if api_status(exc) == 404:
                return None
            raise

    def _observe(self, ns: str, name: str) -> Observed | None:
        k, g, v = self.kube, crd.GROUP, crd.VERSION
        sset = self._get(k.custom.get_namespaced_custom_object, g, v, ns, ss.SET_PLURAL, name)
        if sset is None:
            return None
        sel = f"{ss.LABEL_SAMPLESET}={name}"
        jobs = k.call(k.custom.list_namespaced_custom_object, g, v, ns, ss.JOB_PLURAL).get("items") or []
        volume = f"sampleset-{ns}-{name}"
        return Observed(
            sampleset=sset,
            samplejobs=[j for j in jobs if (j.get("spec") or {}).get("sampleSet") == name],
            jobs=k.call(self.batch.list_namespaced_job, ns, label_selector=sel).get("items") or [],
            pods=k.list_pods(ns, sel),
            volume=self._get(k.core.read_persistent_volume, volume),
            claim=self._get(k.core.read_namespaced_persistent_volume_claim, ss.claim_name(name), ns),
            nodes=k.call(k.core.list_node).get("items") or [],
        )

    def _round(self, ns: str, name: str) -> SetPlan | None:
        seen = self._observe(ns, name)
        if seen is None:
            return None
        plan = reconcile(seen, self.clock())
        self._apply(seen, plan)
        return plan

    def _apply(self, seen: Observed, plan: SetPlan) -> None:
        k, g, v = self.kube, crd.GROUP, crd.VERSION
        sset = seen.sampleset
        meta = sset["metadata"]
        ns, name = meta["namespace"], meta["name"]
        if plan.finalizer == "add":
            sset = self._finalizers(sset, [*(meta.get("finalizers") or []), crd.FINALIZER])
        for obj in plan.create:
            self._create(ns, obj)
        for kind, what in plan.delete:
            self._delete(ns, kind, what)
        for node, on in plan.labels.items():
            patch = {"metadata": {"labels": {ss.cache_label(ns, name): "true" if on else None}}}
            self.kube.quietly(k.core.patch_node, node, patch)
        by_name = {str(j["metadata"]["name"]): j for j in seen.samplejobs}
        for job_name, status in plan.job_status.items():
            old = by_name[job_name]
            body = {"metadata": {"resourceVersion": old["metadata"]["resourceVersion"]}, "status": status}
            k.call(k.custom.patch_namespaced_custom_object_status, g, v, ns, ss.JOB_PLURAL, job_name, body)
        if plan.status is not None:
            body = {
                "metadata": {"resourceVersion": sset["metadata"]["resourceVersion"]},
                "status": plan.status,
            }
            sset = k.call(k.custom.patch_namespaced_custom_object_status, g, v, ns, ss.SET_PLURAL, name, body)
        if plan.finalizer == "remove":
            self._finalizers(
                sset, [f for f in sset["metadata"].get("finalizers") or [] if f != crd.FINALIZER]
            )
        if plan.requeue_after is not None:
            self._requeue(ns, name, plan.requeue_after)

    def _finalizers(self, sset: Obj, finalizers: list[str]) -> Obj:
        meta = sset["metadata"]
        patch = {"metadata": {"finalizers": finalizers, "resourceVersion": meta["resourceVersion"]}}
        k = self.kube
        return k.call(
            k.custom.patch_namespaced_custom_object,
            crd.GROUP,
            crd.VERSION,
            meta["namespace"],
            ss.SET_PLURAL,
            meta["name"],
            patch,
        )

    def _create(self, ns: str, obj: Obj) -> None:
        k, kind = self.kube, obj["kind"]
        try:
            if kind == "PersistentVolume":
                k.call(k.core.create_persistent_volume, obj)
            elif kind == "PersistentVolumeClaim":
                k.call(k.core.create_namespaced_persistent_volume_claim, ns, obj)
            else:
                k.call(self.batch.create_namespaced_job, ns, obj)
        except client.ApiException as exc:
            if api_status(exc) != 409:
                raise

    def _delete(self, ns: str, kind: str, name: str) -> None:
        k = self.kube
        if kind == "PersistentVolume":
            self.kube.quietly(k.core.delete_persistent_volume, name)
        elif kind == "PersistentVolumeClaim":
            self.kube.quietly(k.core.delete_namespaced_persistent_volume_claim, name, ns)
        else:
            self.kube.quietly(self.batch.delete_namespaced_job, name, ns, propagation_policy="Background")
