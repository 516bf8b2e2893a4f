"""What the kubelet and the scheduler would do to pods, done by tests through the real client.

The fake API server has no kubelet: a test binds a pod to a node (``pods/binding``, as a scheduler)
and writes its status (``pods/status``, as a kubelet) — phase, pod IP, readiness, container states
with exit codes and restart counts — and writes what the container printed (``FakeKube.write_log``).
"""

from __future__ import annotations

import datetime
import itertools
from typing import Any

from kubernetes import client

from tests.kube.fakeapi import FakeKube

__all__ = ["Kubelet"]

_ips = itertools.count(2)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Kubelet:
    def __init__(self, kube: FakeKube, api: client.ApiClient, node: str = "node-1") -> None:
        self.kube, self.core, self.node = kube, client.CoreV1Api(api), node

    def pod(self, ns: str, name: str) -> dict[str, Any]:
        return self.kube.get("pods", name, ns)

    def _container(self, pod: dict[str, Any]) -> str:
        return str(pod["spec"]["containers"][0]["name"])

    def _status(self, ns: str, name: str, status: dict[str, Any]) -> None:
        self.core.patch_namespaced_pod_status(name, ns, {"status": status})

    def bind(self, ns: str, name: str, node: str | None = None) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node or self.node},
        }
        self.core.create_namespaced_pod_binding(name, ns, body, _preload_content=False)

    def run(self, ns: str, name: str, *, log: str = "", restarts: int = 0) -> None:
        """Bind (if unbound), then Running and Ready with a pod IP; ``log``: its first output."""
        pod = self.pod(ns, name)
        if not pod["spec"].get("nodeName"):
            self.bind(ns, name)
        c = self._container(pod)
        self._status(
            ns,
            name,
            {
                "phase": "Running",
                "podIP": f"10.1.0.{next(_ips)}",
                "startTime": _now(),
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True"},
                ],
                "containerStatuses": [
                    {
                        "name": c,
                        "ready": True,
                        "restartCount": restarts,
                        "image": "x",
                        "imageID": "",
                        "state": {"running": {"startedAt": _now()}},
                    }
                ],
            },
        )
        if log:
            self.kube.write_log(ns, name, log)

    def end(self, ns: str, name: str, code: int = 0, *, log: str = "", reason: str | None = None) -> None:
        """The container exited with ``code``: the pod Succeeded (0) or Failed."""
        pod = self.pod(ns, name)
        if log:
            self.kube.write_log(ns, name, log)
        c = self._container(pod)
        term = {
            "exitCode": code,
            "reason": reason or ("Completed" if code == 0 else "Error"),
            "startedAt": _now(),
            "finishedAt": _now(),
        }
        self._status(
            ns,
            name,
            {
                "phase": "Succeeded" if code == 0 else "Failed",
                "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "False"},
                ],
                "containerStatuses": [
                    {
                        "name": c,
                        "ready": False,
                        "restartCount": 0,
                        "image": "x",
                        "imageID": "",
                        "state": {"terminated": term},
                    }
                ],
            },
        )

    def unschedulable(self, ns: str, name: str, message: str) -> None:
        self._status(
            ns,
            name,
            {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
                ],
            },
        )

    def waiting(self, ns: str, name: str, reason: str, message: str = "") -> None:
        pod = self.pod(ns, name)
        self._status(
            ns,
            name,
            {
                "phase": "Pending",
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": self._container(pod),
                        "ready": False,
                        "restartCount": 0,
                        "image": "x",
                        "imageID": "",
                        "state": {"waiting": {"reason": reason, "message": message}},
                    }
                ],
            },
        )
