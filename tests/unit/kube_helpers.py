"""Test helpers for the pure Kubernetes modules: TrainingJob dicts, and a tiny in-memory cluster.

``Cluster`` applies an ``ObjectPlan`` the way the operator does (create, delete, stop, status, finalizer)
and lets a test play the kubelet and the scheduler: ``run``, ``ready``, ``exit``, ``unschedulable``.
It is not an API server (7B's ``tests/kube/fakeapi.py`` is); it only keeps the reconcile table
tests short.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from paddlecloud.backends.kubernetes import crd
from paddlecloud.backends.kubernetes.objects import STOP_PATCH, ObjectPlan, reconcile
from paddlecloud.backends.kubernetes.status import rfc3339

Obj = dict[str, Any]
T0 = 1_800_000_000.0


def training_job(name: str = "fit", **spec: Any) -> Obj:
    """A TrainingJob as the API server returns it (uid, generation, finalizer added)."""
    base: Obj = {
        "user": "alice",
        "image": "python:3.11-slim",
        "entry": "python train.py",
        "framework": "paddle-ps",
        "package": {"path": f"/pfs/local/home/alice/jobs/{name}/package.tar.gz"},
        "platform": {
            "api": "http://paddlecloud-api.paddlecloud.svc:8080",
            "tokenSecret": f"{name}-job-token",
        },
        "storage": {"claimName": "paddlecloud-data"},
        "output": f"/pfs/local/home/alice/jobs/{name}/output",
        "pserver": {"replicas": 2, "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}}},
        "trainer": {"replicas": 2, "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
    }
    base.update(spec)
    return {
        "apiVersion": crd.API_VERSION,
        "kind": crd.KIND,
        "metadata": {
            "name": name,
            "namespace": "paddlecloud",
            "uid": "0a1b2c3d-0000-4000-8000-000000000001",
            "generation": 1,
            "finalizers": [crd.FINALIZER],
        },
        "spec": base,
    }


#: TrainingJob specs that between them use every feature of the generated objects
VARIANTS: dict[str, dict[str, Any]] = {
    "paddle-ps": {},
    "torch-gpu": {
        "framework": "torch",
        "pserver": {"replicas": 0},
        "trainer": {"replicas": 2, "resources": {"requests": {"cpu": "4", "nvidia.com/gpu": 2}}},
    },
    "torch-elastic": {
        "framework": "torch",
        "pserver": {"replicas": 0},
        "trainer": {"replicas": 2, "min": 1, "max": 4},
    },
    "collective-url": {
        "framework": "paddle-collective",
        "pserver": {"replicas": 0},
        "package": {"url": "https://example.org/pkg.tar.gz"},
        "platform": {},
        "storage": None,
    },
    "volcano-kueue": {
        "scheduling": {
            "schedulerName": "volcano",
            "queue": "q",
            "priorityClassName": "high",
            "minAvailable": 2,
        }
    },
    "kueue-input-elsewhere": {"scheduling": {"queue": "team-a"}, "input": "/pfs/local/public/mnist"},
}


@dataclass
class Cluster:
    """One TrainingJob, its pods and services; ``step`` reconciles and applies the ObjectPlan."""

    job: Obj
    now: float = T0
    pods: dict[str, Obj] = field(default_factory=dict)
    services: dict[str, Obj] = field(default_factory=dict)
    podgroups: dict[str, Obj] = field(default_factory=dict)
    policies: dict[str, Obj] = field(default_factory=dict)
    events: list[tuple[str, str, str]] = field(default_factory=list)
    plans: list[ObjectPlan] = field(default_factory=list)
    deleted_job: bool = False
    stopped: list[str] = field(default_factory=list)

    def step(self, *, keep_deleting: bool = False) -> ObjectPlan:
        plan = reconcile(self.job, list(self.pods.values()), list(self.services.values()), self.now,
                         list(self.podgroups.values()), list(self.policies.values()))  # fmt: skip
        self.plans.append(plan)
        self.apply(plan, keep_deleting)
        return plan

    def apply(self, plan: ObjectPlan, keep_deleting: bool = False) -> None:
        for obj in plan.create:
            obj = copy.deepcopy(obj)
            store = self._stores()[obj["kind"]]
            name = obj["metadata"]["name"]
            assert name not in store, f"created {obj['kind']} {name} twice"
            if obj["kind"] == "Pod":
                obj["status"] = {"phase": "Pending"}
            store[name] = obj
        for d in plan.delete:
            store = self._stores()[d.kind]
            if keep_deleting and d.kind == "Pod" and d.name in store:
                store[d.name]["metadata"]["deletionTimestamp"] = rfc3339(self.now)
            else:
                store.pop(d.name, None)
        for name in plan.stop:
            self.stopped.append(name)
            pod = self.pods[name]
            pod["spec"].update(STOP_PATCH["spec"])
        self.job["status"] = copy.deepcopy(plan.status)
        self.events.extend((e.type, e.reason, e.message) for e in plan.events)
        meta = self.job["metadata"]
        if plan.finalizer == "add":
            meta.setdefault("finalizers", []).append(crd.FINALIZER)
        elif plan.finalizer == "remove":
            meta["finalizers"] = [f for f in meta.get("finalizers", []) if f != crd.FINALIZER]
        self.deleted_job = self.deleted_job or plan.delete_job

    def _stores(self) -> dict[str, dict[str, Obj]]:
        return {"Pod": self.pods, "Service": self.services, "PodGroup": self.podgroups,
                "NetworkPolicy": self.policies}  # fmt: skip

    # -- the kubelet and the scheduler ------------------------------------------------------------

    def pod(self, worker: str) -> Obj:
        return self.pods[f"{self.job['metadata']['name']}-{worker}"]

    def run(self, *workers: str, ready: bool = True) -> None:
        for w in workers:
            pod = self.pod(w)
            pod["spec"]["nodeName"] = "node-1"
            pod["status"] = {
                "phase": "Running",
                "startTime": rfc3339(self.now),
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True" if ready else "False"},
                ],
                "containerStatuses": [{"name": "worker", "state": {"running": {}}}],
            }

    def exit(
        self, worker: str, code: int, reason: str = "", message: str = "", container: str = "worker"
    ) -> None:
        pod = self.pod(worker)
        term = {"exitCode": code, "reason": reason or ("Completed" if code == 0 else "Error"),
                "message": message, "finishedAt": rfc3339(self.now)}  # fmt: skip
        key = "containerStatuses" if container == "worker" else "initContainerStatuses"
        pod["spec"]["nodeName"] = "node-1"
        pod["status"] = {
            "phase": "Succeeded" if code == 0 else "Failed",
            key: [{"name": container, "state": {"terminated": term}}],
        }

    def unschedulable(self, worker: str, message: str) -> None:
        self.pod(worker)["status"] = {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
            ],
        }

    def initializing(self, worker: str, step: str) -> None:
        pod = self.pod(worker)
        pod["spec"]["nodeName"] = "node-1"
        pod["status"] = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "initContainerStatuses": [{"name": step, "state": {"running": {}}}],
        }

    def waiting(self, worker: str, reason: str, message: str) -> None:
        pod = self.pod(worker)
        pod["spec"]["nodeName"] = "node-1"
        pod["status"] = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [
                {"name": "worker", "state": {"waiting": {"reason": reason, "message": message}}}
            ],
        }

    @property
    def status(self) -> Obj:
        return dict(self.job.get("status") or {})

    def workers(self) -> list[str]:
        prefix = self.job["metadata"]["name"] + "-"
        return sorted(n[len(prefix) :] for n in self.pods)

    def env(self, worker: str) -> dict[str, str]:
        container = self.pod(worker)["spec"]["containers"][0]
        return {e["name"]: e.get("value", "<from>") for e in container["env"]}
