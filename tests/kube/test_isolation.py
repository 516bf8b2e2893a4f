"""Isolation of jobs on Kubernetes through the real client, kopf and the fake API server: the operator
creates each TrainingJob's NetworkPolicy (``backends/kubernetes/network.py``) before any of its pods,
never creates a pod while it cannot create the policy, and the policy goes with the TrainingJob
(owner reference); ``--kube-egress`` reaches the policy through the TrainingJob unpruned; an
OOM-killed worker is named in the job's failure."""

from __future__ import annotations

from typing import Any

import pytest
from kopf.testing import KopfRunner
from kubernetes import client

from paddlecloud.backends.kubernetes.backend import KubernetesBackend
from paddlecloud.backends.kubernetes.operator import OperatorConfig, registry
from paddlecloud.backends.kubernetes.settings import KubeSettings
from paddlecloud.backends.kubernetes.status import oom_message, oom_reason
from tests.kube.conftest import wait_for
from tests.kube.fakeapi import FakeKube
from tests.kube.helpers import NS, G, P, V, kube_client, running_operator, training_job
from tests.kube.kubelet import Kubelet
from tests.kube.test_backend import launch

NETPOL = "networkpolicies"
NET = "networking.k8s.io"


def _posts(kube: FakeKube, *collections: str) -> list[str]:
    """Which of ``collections`` (``pods``, ``networkpolicies``) each create went to, in order."""
    names = [path.split("?")[0].rsplit("/", 1)[-1] for m, path in list(kube.requests) if m == "POST"]
    return [n for n in names if n in collections]


@pytest.mark.usefixtures("operator")
def test_the_policy_comes_before_the_pods_and_goes_with_the_job(
    kube: FakeKube, custom: client.CustomObjectsApi
) -> None:
    custom.create_namespaced_custom_object(G, V, NS, P, training_job("job", pservers=1, trainers=1))
    wait_for("the pserver's pod", lambda: kube.list("pods", NS))
    posts = _posts(kube, "pods", "services", NETPOL)
    assert posts[0] == NETPOL and posts.count(NETPOL) == 1, posts
    (policy,) = kube.list(NETPOL, NS, group=NET)
    tj = kube.get(P, "job", NS, group=G)
    assert policy["metadata"]["ownerReferences"][0]["uid"] == tj["metadata"]["uid"]
    assert policy["spec"]["podSelector"] == {"matchLabels": {"paddlecloud.org/job": "job"}}
    assert policy["spec"]["ingress"] == [
        {"from": [{"podSelector": {"matchLabels": {"paddlecloud.org/job": "job"}}}]}
    ]
    # the package URL of the helpers' jobs (http://files.example/...) is reachable on its port, at
    # public addresses only (never the node's, a pod's or the cloud's metadata one)
    (files,) = [r for r in policy["spec"]["egress"] if r.get("ports") == [{"protocol": "TCP", "port": 80}]]
    blocks = [peer["ipBlock"] for peer in files["to"]]
    assert {"cidr": "0.0.0.0/0", "except": blocks[0]["except"]} in blocks
    assert "169.254.0.0/16" in blocks[0]["except"] and "10.0.0.0/8" in blocks[0]["except"]
    custom.delete_namespaced_custom_object(G, V, NS, P, "job")
    wait_for("the TrainingJob to go", lambda: kube.list(P, NS, group=G) == [])
    wait_for("its policy to go with it", lambda: kube.list(NETPOL, NS, group=NET) == [])


def test_no_pod_is_created_while_the_policy_cannot_be(
    kube: FakeKube, custom: client.CustomObjectsApi
) -> None:
    """A cluster that refuses the policy (an operator without the RBAC rule) gets no pod of the job:
    the reconcile fails, says so on the job, and is tried again."""
    kube.fail_next("POST", rf"/namespaces/{NS}/{NETPOL}$", 500, times=2)
    reg = registry(kube_client(kube), OperatorConfig(resync_s=0))
    with KopfRunner(["run", "-A", "--standalone"], registry=reg, timeout=30):  # failures are logged
        custom.create_namespaced_custom_object(G, V, NS, P, training_job("job", trainers=1))
        events = wait_for("a ReconcileFailed event", lambda: [
            e for e in kube.list("events", NS) if e["reason"] == "ReconcileFailed"])  # fmt: skip
        assert "500" in events[0]["message"]
        wait_for("the pod, once the policy is made", lambda: kube.list("pods", NS))
    posts = _posts(kube, "pods", NETPOL)
    assert posts[:3] == [NETPOL] * 3 and posts[3] == "pods", posts  # two refused, then made, then the pod
    assert sum(1 for m, p, *_ in kube.errors if m == "POST" and p.endswith(NETPOL)) == 2


def test_kube_egress_reaches_the_policy_through_the_training_job(kube: FakeKube, crd: dict[str, Any]) -> None:
    kube.add_node("node-1", cpu="16", memory="64Gi", gpu=4)
    settings = KubeSettings.from_options({"kube_egress": ("10.0.0.9/32:443",)})
    with running_operator(kube):
        backend = KubernetesBackend(settings, kube=kube_client(kube, "paddlecloud-server"))
        try:
            backend.start(launch())
            ns = "paddlecloud-alice"
            (policy,) = wait_for("the job's policy", lambda: kube.list(NETPOL, ns, group=NET))
        finally:
            backend.close()
    assert kube.store.pruned == []  # spec.network is in the CRD's schema
    egress = policy["spec"]["egress"]
    assert {
        "to": [{"ipBlock": {"cidr": "10.0.0.9/32"}}],
        "ports": [{"protocol": "TCP", "port": 443}],
    } in egress
    api = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "paddlecloud-api"}}}  # a short name
    assert {"to": [api], "ports": [{"protocol": "TCP", "port": 8080}]} in egress


@pytest.mark.usefixtures("operator")
def test_an_oom_killed_trainer_fails_the_job_saying_so(
    kube: FakeKube, custom: client.CustomObjectsApi, kubelet: Kubelet
) -> None:
    body = training_job("job", trainers=1)
    body["spec"]["trainer"]["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    custom.create_namespaced_custom_object(G, V, NS, P, body)
    wait_for("the trainer", lambda: kube.list("pods", NS))
    kubelet.run(NS, "job-trainer-0")
    kubelet.end(NS, "job-trainer-0", 137, reason="OOMKilled")
    wait_for("Failed", lambda: (kube.get(P, "job", NS, group=G).get("status") or {}).get("phase") == "Failed")
    status = kube.get(P, "job", NS, group=G)["status"]
    assert "OOMKilled" in status["message"] and status["lastFailure"]["reason"] == "OOMKilled"
    pod = kube.get("pods", "job-trainer-0", NS)
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    assert oom_reason(pod["status"]) == "OOMKilled"
    assert (
        oom_message(pod) == "container worker went over its memory limit (1Gi) and was killed (exit code 137)"
    )
