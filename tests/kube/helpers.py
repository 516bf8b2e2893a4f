"""Shared pieces of the Kubernetes contract tests: TrainingJob bodies, the operator under kopf, and
a kubelet that moves pods along by itself (for tests that drive a whole job)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from kopf.testing import KopfRunner
from kubernetes import client

from paddlecloud.backends.kubernetes import crd
from paddlecloud.backends.kubernetes.kube import Kube
from paddlecloud.backends.kubernetes.operator import OperatorConfig, registry
from tests.kube.conftest import wait_for
from tests.kube.fakeapi import FakeKube
from tests.kube.kubelet import Kubelet

G, V, P = crd.GROUP, crd.VERSION, crd.PLURAL
NS = "ns1"


def training_job(name: str, *, pservers: int = 0, trainers: int = 1, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "user": "alice",
        "image": "python:3.11-slim",
        "entry": "python train.py",
        "framework": "paddle-ps" if pservers else "none",
        "package": {"url": "http://files.example/pkg.tar.gz"},
        "pserver": {"replicas": pservers},
        "trainer": {"replicas": trainers},
    }
    body.update(spec)
    return {"apiVersion": f"{G}/{V}", "kind": crd.KIND, "metadata": {"name": name}, "spec": body}


def kube_client(kube: FakeKube, agent: str = "paddlecloud-test") -> Kube:
    """A client of the fake; ``agent`` (its User-Agent) lets ``fail_next`` pick whom to fail."""
    api = client.ApiClient(client.Configuration(host=kube.url))
    api.user_agent = agent
    # the production default is 10 s; a fresh clone's `make test` beside two CPU hogs once saw the
    # fake take 4.9 s to accept a connection (the operator then logged a timed-out reconcile)
    return Kube(api, timeout_s=15.0)


@contextlib.contextmanager
def running_operator(kube: FakeKube, config: OperatorConfig | None = None) -> Iterator[KopfRunner]:
    """The operator (its kopf registry) against the fake, all namespaces, no peering."""
    config = config or OperatorConfig(resync_s=0)
    with KopfRunner(
        ["run", "-A", "--standalone"],
        registry=registry(kube_client(kube, "paddlecloud-operator"), config),
        timeout=30,
    ) as r:
        wait_for("the operator to watch TrainingJobs and Pods", lambda: _watching(kube), timeout=15)
        yield r
    assert "Traceback" not in r.output, r.output[-5000:]  # no handler failed


def _watching(kube: FakeKube) -> bool:
    watched = kube.call(lambda: {(lst.group, lst.plural) for lst in kube.store.listeners})
    return {(G, P), ("", "pods")} <= watched


class AutoKubelet:
    """A thread doing what scheduler and kubelet would, every ``period`` seconds, for pods of
    ``namespace``: a new pod is bound, Running and Ready (``decide(pod)`` may instead return an exit
    code to end it with, or ``None`` to leave it Pending), and writes ``hello from <worker>``; a pod
    the platform stopped in place (``spec.activeDeadlineSeconds``) ends with 137, DeadlineExceeded."""

    def __init__(
        self,
        kube: FakeKube,
        kubelet: Kubelet,
        namespace: str,
        decide: Callable[[dict[str, Any]], int | str | None] = lambda pod: "run",
        period: float = 0.05,
    ) -> None:
        self.kube, self.kubelet, self.ns, self.decide, self.period = kube, kubelet, namespace, decide, period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="auto-kubelet", daemon=True)
        self.errors: list[BaseException] = []

    def __enter__(self) -> AutoKubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            try:
                for pod in self.kube.list("pods", self.ns):
                    self._step(pod)
            except client.ApiException as exc:
                if exc.status not in (404, 409):  # the pod went or changed meanwhile: next round
                    self.errors.append(exc)
            except Exception as exc:  # reported by the test
                self.errors.append(exc)

    def _step(self, pod: dict[str, Any]) -> None:
        meta, status = pod["metadata"], pod.get("status") or {}
        name, phase = meta["name"], status.get("phase")
        if meta.get("deletionTimestamp") or phase in ("Succeeded", "Failed"):
            return
        if pod["spec"].get("activeDeadlineSeconds") == 1 and phase == "Running":
            self.kubelet.end(self.ns, name, 137, reason="DeadlineExceeded")
            return
        if phase != "Pending" or status.get("containerStatuses"):
            return
        what = self.decide(pod)
        worker = (meta.get("annotations") or {}).get(f"{crd.GROUP}/worker", name)
        if what == "run":
            self.kubelet.run(self.ns, name, log=f"hello from {worker}\n")
        elif isinstance(what, int):
            self.kubelet.run(self.ns, name, log=f"hello from {worker}\n")
            self.kubelet.end(self.ns, name, what, log=f"{worker} exits with {what}\n")
