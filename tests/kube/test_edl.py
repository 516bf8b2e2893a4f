"""The EDL controller: the scheduler's elastic policy over a snapshot of Nodes, Pods and
TrainingJobs, written through the scale subresource; never a job that is not elastic, nor one the
API server sizes."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from paddlecloud.backends.kubernetes.edl import ANNOTATION_REQUESTED, EdlController, build_snapshot
from paddlecloud.backends.kubernetes.launch import LABEL_SCHEDULER, PLATFORM
from tests.kube.fakeapi import FakeKube
from tests.kube.helpers import NS, G, P, V, kube_client, training_job
from tests.kube.kubelet import Kubelet

ONE_CPU = {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}


def _pod(job: str, index: int, run_on: str | None = None) -> dict[str, Any]:
    labels = {
        "app.kubernetes.io/managed-by": "paddlecloud",
        "paddlecloud.org/job": job,
        "paddlecloud.org/role": "trainer",
        "paddlecloud.org/index": str(index),
        "paddlecloud.org/run": "0",
    }
    return {
        "metadata": {"name": f"{job}-trainer-{index}", "labels": labels},
        "spec": {"containers": [{"name": "worker", "image": "x", **ONE_CPU}]},
    }


def _submit(
    kube: FakeKube,
    custom: client.CustomObjectsApi,
    kubelet: Kubelet,
    name: str,
    replicas: int,
    **trainer: int,
) -> None:
    body = training_job(name, trainers=replicas)
    body["spec"]["trainer"].update(ONE_CPU, **trainer)
    custom.create_namespaced_custom_object(G, V, NS, P, body)
    core = client.CoreV1Api(custom.api_client)
    for i in range(replicas):  # as the operator would have, bound and running
        core.create_namespaced_pod(NS, _pod(name, i))
        kubelet.run(NS, f"{name}-trainer-{i}")


def _replicas(kube: FakeKube, name: str) -> int:
    return int(kube.get(P, name, NS, group=G)["spec"]["trainer"]["replicas"])


def test_elastic_job_grows_into_free_capacity_fixed_job_never_changes(
    kube: FakeKube, custom: client.CustomObjectsApi, kubelet: Kubelet
) -> None:
    kube.add_node("node-1", cpu="8", memory="32Gi")
    _submit(kube, custom, kubelet, "fixed", 2)
    _submit(kube, custom, kubelet, "stretchy", 2, min=1, max=4)
    edl = EdlController(kube_client(kube))
    done = edl.step()
    assert [(r.job.name, r.trainers) for r in done] == [("stretchy", 4)]
    assert _replicas(kube, "stretchy") == 4 and _replicas(kube, "fixed") == 2
    annotations = kube.get(P, "stretchy", NS, group=G)["metadata"]["annotations"]
    assert annotations[ANNOTATION_REQUESTED] == "2" and "paddlecloud.org/resized-at" in annotations
    events = [e for e in kube.list("events", NS) if e["reason"] == "Resized"]
    assert "trainers 2 -> 4" in events[0]["message"]
    assert edl.step() == []  # the new trainers are not bound yet: the job is not settled


def test_elastic_job_shrinks_for_an_unschedulable_job(
    kube: FakeKube, custom: client.CustomObjectsApi, kubelet: Kubelet
) -> None:
    kube.add_node("node-1", cpu="4", memory="32Gi")
    _submit(kube, custom, kubelet, "stretchy", 4, min=1, max=4)
    body = training_job("waiting", trainers=2)
    body["spec"]["trainer"].update(ONE_CPU)
    custom.create_namespaced_custom_object(G, V, NS, P, body)
    custom.patch_namespaced_custom_object_status(
        G,
        V,
        NS,
        P,
        "waiting",
        {
            "status": {
                "phase": "Pending",
                "reason": "Unschedulable",
                "message": "0/1 nodes are available: 1 Insufficient cpu.",
            }
        },
    )
    done = EdlController(kube_client(kube)).step()
    assert [(r.job.name, r.trainers) for r in done] == [("stretchy", 2)]
    assert _replicas(kube, "waiting") == 2


def test_jobs_the_api_server_sizes_are_left_alone(
    kube: FakeKube, custom: client.CustomObjectsApi, kubelet: Kubelet
) -> None:
    kube.add_node("node-1", cpu="8", memory="32Gi")
    _submit(kube, custom, kubelet, "platform", 2, min=1, max=4)
    custom.patch_namespaced_custom_object(
        G, V, NS, P, "platform", {"metadata": {"labels": {LABEL_SCHEDULER: PLATFORM}}}
    )
    assert EdlController(kube_client(kube)).step() == []
    assert _replicas(kube, "platform") == 2


def test_snapshot_counts_every_bound_pod_against_its_node(
    kube: FakeKube, custom: client.CustomObjectsApi, kubelet: Kubelet
) -> None:
    kube.add_node("node-1", cpu="8", memory="32Gi", gpu=2)
    kube.add_node("node-2", cpu="8", memory="32Gi")
    _submit(kube, custom, kubelet, "stretchy", 2, min=1, max=3)
    other = {
        "metadata": {"name": "someone-else"},
        "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
        },
    }
    client.CoreV1Api(custom.api_client).create_namespaced_pod(NS, other)
    kubelet.run(NS, "someone-else")
    snap, refs = build_snapshot(
        kube.list("nodes"), kube.list("pods", None), kube.list(P, None, group=G), 0.0, 1
    )
    node = {n.name: n for n in snap.nodes}["node-1"]
    assert node.allocated.cpu_m == 2000 and node.allocated.gpu == 1 and node.free_gpus == (1,)
    (job,) = snap.running
    assert job.key == "ns1/stretchy" and job.running == 2 and (job.min_trainers, job.max_trainers) == (1, 3)
    assert refs["ns1/stretchy"].resizable


def test_no_job_grows_while_pods_wait_for_a_node(
    kube: FakeKube, custom: client.CustomObjectsApi, kubelet: Kubelet
) -> None:
    kube.add_node("node-1", cpu="8", memory="32Gi")
    _submit(kube, custom, kubelet, "stretchy", 2, min=1, max=4)
    _submit(kube, custom, kubelet, "fixed", 1)
    custom.patch_namespaced_custom_object_scale(G, V, NS, P, "fixed", {"spec": {"replicas": 2}})
    client.CoreV1Api(custom.api_client).create_namespaced_pod(NS, _pod("fixed", 1))  # not on a node yet
    assert EdlController(kube_client(kube)).step() == []
    kubelet.run(NS, "fixed-trainer-1")
    assert [(r.job.name, r.trainers) for r in EdlController(kube_client(kube)).step()] == [("stretchy", 4)]
