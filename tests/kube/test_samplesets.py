"""SampleSets on Kubernetes, against the strict fake API server with the operator running: the API
server's ``KubernetesBackend.samplesets`` writes SampleSet / SampleJob custom resources, the operator
makes the JuiceFS CSI volume and claim, runs each SampleJob as Kubernetes Jobs (the test plays the
Job controller: a pod with the Job's termination message, then the Job's status), reports progress,
labels the nodes whose cache holds the data, and on delete purges the data and cleans up; a job
with a SampleSet gets its claim read-only at /mnt/sampleset and prefers the cache nodes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from paddlecloud.backends.base import Capability
from paddlecloud.backends.kubernetes import sampleset_crd as ss
from paddlecloud.backends.kubernetes.backend import KubernetesBackend
from paddlecloud.backends.kubernetes.settings import KubeSettings
from paddlecloud.backends.samplesets import (
    SampleSetRef,
    SampleSetsUnavailable,
    SampleTask,
    SampleTaskKind,
    SampleTaskState,
)
from tests.kube.conftest import wait_for
from tests.kube.fakeapi import FakeKube
from tests.kube.helpers import G, V, kube_client, running_operator
from tests.kube.test_backend import launch

NS = "paddlecloud-alice"
PV = f"sampleset-{NS}-imagenet"
CLAIM = "sampleset-imagenet"
GI = 2**30


@pytest.fixture
def sampleset_crds(api: client.ApiClient, crd: dict[str, Any]) -> None:
    for m in ss.manifests():
        client.ApiextensionsV1Api(api).create_custom_resource_definition(m)


@pytest.fixture
def backend(kube: FakeKube, sampleset_crds: None, tmp_path: Path) -> Iterator[KubernetesBackend]:
    kube.add_node("node-1", cpu="16", memory="64Gi")
    kube.add_node("node-2", cpu="16", memory="64Gi")
    with running_operator(kube):
        settings = KubeSettings(storage_claim="paddlecloud-data", grace_s=5)
        b = KubernetesBackend(settings, kube=kube_client(kube), data_dir=tmp_path)
        try:
            yield b
        finally:
            b.close()


def ref(tmp_path: Path, **kw: Any) -> SampleSetRef:
    fields: dict[str, Any] = dict(
        key="alice/imagenet",
        owner="alice",
        name="imagenet",
        uid="ss-1",
        source=tmp_path / "pfs/files/local/home/alice/data",
        cache_size=GI,
        nodes=("node-1", "node-2"),
    )
    fields.update(kw)
    return SampleSetRef(**fields)


def sampleset(kube: FakeKube) -> dict[str, Any]:
    return kube.get(ss.SET_PLURAL, "imagenet", NS, group=G)


def jobs(kube: FakeKube, samplejob: str) -> dict[str, dict[str, Any]]:
    found = kube.list("jobs", NS, group="batch", labels=f"{ss.LABEL_SAMPLEJOB}={samplejob}")
    return {j["metadata"]["name"]: j for j in found}


def jobs_named(kube: FakeKube) -> dict[str, dict[str, Any]]:
    return {j["metadata"]["name"]: j for j in kube.list("jobs", NS, group="batch")}


def finish(api: client.ApiClient, job: dict[str, Any], code: int = 0, message: str = "") -> None:
    """What the Job controller and the kubelet would do: the Job's pod ends with ``code`` and the
    termination ``message``, then the Job is Complete (or Failed)."""
    name = job["metadata"]["name"]
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    labels = {**job["spec"]["template"]["metadata"]["labels"], "job-name": name}
    pod = {"metadata": {"name": f"{name}-pod", "labels": labels}, "spec": job["spec"]["template"]["spec"]}
    core.create_namespaced_pod(NS, pod)
    term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "message": message}
    status = {
        "phase": "Succeeded" if code == 0 else "Failed",
        "containerStatuses": [
            {
                "name": "juicefs",
                "ready": False,
                "restartCount": 0,
                "image": "x",
                "imageID": "",
                "state": {"terminated": term},
            }
        ],
    }
    core.patch_namespaced_pod_status(f"{name}-pod", NS, {"status": status})
    cond = (
        {"type": "Complete", "status": "True"}
        if code == 0
        else {
            "type": "Failed",
            "status": "True",
            "reason": "BackoffLimitExceeded",
            "message": "Job has reached the specified backoff limit",
        }
    )
    counts = {"succeeded": 1} if code == 0 else {"failed": 3}
    batch.patch_namespaced_job_status(name, NS, {"status": {**counts, "conditions": [cond]}})


def bind(api: client.ApiClient) -> None:
    """The PV controller binding the claim to its pre-bound volume (the fake has none)."""
    client.CoreV1Api(api).patch_namespaced_persistent_volume_claim_status(
        CLAIM, NS, {"status": {"phase": "Bound"}}
    )


def run_task(b: KubernetesBackend, r: SampleSetRef, task: SampleTask) -> None:
    b.samplesets.start_task(r, task)
    wait_for(f"SampleJob {task.id} running", lambda: b.samplesets.task_status(r, task.id).total > 0)


def test_the_backend_declares_samplesets(kube: FakeKube, crd: dict[str, Any]) -> None:
    b = KubernetesBackend(KubeSettings(), kube=kube_client(kube))
    assert Capability.SAMPLESETS in b.capabilities
    b.close()


def test_a_sampleset_lives_syncs_warms_clears_and_is_deleted(
    kube: FakeKube, api: client.ApiClient, backend: KubernetesBackend, tmp_path: Path
) -> None:
    r, sets = ref(tmp_path), backend.samplesets
    sets.ensure(r)
    obj = sampleset(kube)
    assert obj["spec"]["source"] == {
        "claimName": "paddlecloud-data",
        "path": "pfs/files/local/home/alice/data",
    }
    assert obj["spec"]["nodes"] == ["node-1", "node-2"] and obj["spec"]["cacheSize"] == str(GI)
    pv = wait_for("the CSI volume", lambda: kube.list("persistentvolumes"))[0]
    assert pv["metadata"]["name"] == PV and pv["spec"]["csi"]["driver"] == "csi.juicefs.com"
    assert f"subdir=/samplesets/{obj['metadata']['uid']}" in pv["spec"]["mountOptions"]
    assert "cache-size=1024" in pv["spec"]["mountOptions"]
    claim = wait_for("the claim", lambda: kube.list("persistentvolumeclaims", NS))[0]
    assert claim["metadata"]["name"] == CLAIM and claim["spec"]["volumeName"] == PV
    pending = wait_for(
        "Pending with why", lambda: sampleset(kube).get("status", {}).get("phase") == "Pending"
    )
    assert pending and "csi.juicefs.com" in sampleset(kube)["status"]["message"]
    assert "paddlecloud.org/cleanup" in sampleset(kube)["metadata"]["finalizers"]

    # a task before the claim is bound waits, saying why
    sets.start_task(r, SampleTask("sj-1", SampleTaskKind.SYNC))
    wait_for("the SampleJob waits", lambda: "to be Ready" in sets.task_status(r, "sj-1").message)
    assert jobs(kube, "imagenet-sj-1") == {}
    bind(api)
    wait_for("Ready", lambda: sampleset(kube).get("status", {}).get("phase") == "Ready")

    # sync: one Job with the source read-only; its summary becomes files and bytes
    (sync,) = wait_for("the sync Job", lambda: jobs(kube, "imagenet-sj-1")).values()
    pod = sync["spec"]["template"]["spec"]
    assert pod["containers"][0]["command"][2].startswith(
        "juicefs sync --dirs --delete-dst /mnt/source/ /mnt/sampleset/"
    )
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["source"]["subPath"] == "pfs/files/local/home/alice/data" and mounts["source"]["readOnly"]
    assert sets.task_status(r, "sj-1").state == SampleTaskState.RUNNING
    finish(api, sync, message=json.dumps({"files": 3, "bytes": 3000}))
    wait_for("sync succeeded", lambda: sets.task_status(r, "sj-1").state == SampleTaskState.SUCCEEDED)
    status = wait_for("files and bytes", lambda: sets.status(r).bytes == 3000 and sets.status(r))
    assert status.files == 3 and [n.node for n in status.nodes] == ["node-1", "node-2"]
    assert all(n.mounted and n.cached_bytes == 0 for n in status.nodes)

    # warmup: a Job per node, pinned there; the nodes get the cache label
    run_task(backend, r, SampleTask("sj-2", SampleTaskKind.WARMUP))
    warm = wait_for(
        "two warmup Jobs", lambda: len(jobs(kube, "imagenet-sj-2")) == 2 and jobs(kube, "imagenet-sj-2")
    )
    where = sorted(
        j["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"] for j in warm.values()
    )
    assert where == ["node-1", "node-2"]
    first, second = warm.values()
    finish(api, first)
    wait_for("1 of 2", lambda: sets.task_status(r, "sj-2").done == 1)
    assert sets.task_status(r, "sj-2").state == SampleTaskState.RUNNING
    finish(api, second)
    wait_for("warmup succeeded", lambda: sets.task_status(r, "sj-2").state == SampleTaskState.SUCCEEDED)
    label = ss.cache_label(NS, "imagenet")
    wait_for(
        "both nodes labelled",
        lambda: all(label in n["metadata"].get("labels", {}) for n in kube.list("nodes")),
    )
    wait_for("caches full", lambda: [n.cached_bytes for n in sets.status(r).nodes] == [3000, 3000])

    # clear: the caches empty, the labels go
    run_task(backend, r, SampleTask("sj-3", SampleTaskKind.CLEAR))
    cleared = wait_for(
        "two clear Jobs", lambda: len(jobs(kube, "imagenet-sj-3")) == 2 and jobs(kube, "imagenet-sj-3")
    )
    assert all(
        "juicefs warmup --evict /mnt/sampleset/"
        in j["spec"]["template"]["spec"]["containers"][0]["command"][2]
        for j in cleared.values()
    )
    for j in cleared.values():
        finish(api, j)
    wait_for(
        "labels removed",
        lambda: not any(label in n["metadata"].get("labels", {}) for n in kube.list("nodes")),
    )
    wait_for("caches empty", lambda: [n.cached_bytes for n in sets.status(r).nodes] == [0, 0])

    # rmr: one Job on the path; the summary after it counts
    run_task(backend, r, SampleTask("sj-4", SampleTaskKind.RMR, "train/old dir"))
    (rmr,) = wait_for("the rmr Job", lambda: jobs(kube, "imagenet-sj-4")).values()
    assert rmr["spec"]["template"]["spec"]["containers"][0]["command"][2].startswith(
        "juicefs rmr '/mnt/sampleset/train/old dir' && "
    )
    finish(api, rmr, message=json.dumps({"files": 1, "bytes": 1000}))
    wait_for("rmr counted", lambda: sets.status(r).files == 1 and sets.status(r).bytes == 1000)

    # a warmup that fails on one node fails, naming it
    run_task(backend, r, SampleTask("sj-5", SampleTaskKind.WARMUP))
    bad = wait_for("two Jobs", lambda: len(jobs(kube, "imagenet-sj-5")) == 2 and jobs(kube, "imagenet-sj-5"))
    one, two = sorted(bad.values(), key=lambda j: j["metadata"]["name"])
    finish(api, one)
    finish(api, two, code=1)
    failed = wait_for("failed", lambda: sets.task_status(r, "sj-5").state == SampleTaskState.FAILED)
    assert (
        failed
        and "on node-2: Job has reached the specified backoff limit" in sets.task_status(r, "sj-5").message
    )
    wait_for(
        "node-1 labelled again", lambda: label in kube.get("nodes", "node-1")["metadata"].get("labels", {})
    )
    assert label not in kube.get("nodes", "node-2")["metadata"].get("labels", {})

    # delete: a purge Job empties the volume, then claim, volume, labels and the SampleSet go
    sets.delete(r)
    purge = wait_for("the purge Job", lambda: jobs_named(kube).get("imagenet-purge"))
    assert "juicefs rmr" in purge["spec"]["template"]["spec"]["containers"][0]["command"][2]
    assert kube.list("persistentvolumes")  # kept until the purge ended
    finish(api, purge, message=json.dumps({"files": 0, "bytes": 0}))
    wait_for("the SampleSet gone", lambda: not kube.list(ss.SET_PLURAL, NS, group=G))
    assert kube.list("persistentvolumes") == [] and kube.list("persistentvolumeclaims", NS) == []
    assert not any(label in n["metadata"].get("labels", {}) for n in kube.list("nodes"))
    assert wait_for("SampleJobs collected", lambda: kube.list(ss.JOB_PLURAL, NS, group=G) == [])
    sets.delete(r)  # idempotent
    assert sets.task_status(r, "sj-1").state == SampleTaskState.FAILED  # gone


def test_a_job_with_a_sampleset_mounts_it_read_only_and_prefers_cache_nodes(
    kube: FakeKube, backend: KubernetesBackend, tmp_path: Path
) -> None:
    r = ref(tmp_path)
    backend.samplesets.ensure(r)
    backend.start(launch("fit", pservers=1, trainers=2, sampleset=r))
    tj = kube.get("trainingjobs", "fit", NS, group=G)
    assert tj["spec"]["sampleset"] == {"name": "imagenet"}
    pods = wait_for("the pserver pod", lambda: kube.list("pods", NS, labels="paddlecloud.org/job=fit"))
    for pod in pods:
        spec = pod["spec"]
        (vol,) = [v for v in spec["volumes"] if v["name"] == "sampleset"]
        assert vol["persistentVolumeClaim"] == {"claimName": CLAIM, "readOnly": True}
        worker = spec["containers"][0]
        assert {"name": "sampleset", "mountPath": "/mnt/sampleset", "readOnly": True} in worker[
            "volumeMounts"
        ]
        env = {e["name"]: e.get("value") for e in worker["env"]}
        assert env["PADDLECLOUD_SAMPLESET_DIR"] == "/mnt/sampleset"


def test_trainer_pods_prefer_nodes_with_the_cache() -> None:
    from paddlecloud.backends.kubernetes import pods
    from paddlecloud.backends.kubernetes.spec import read_job
    from tests.kube.helpers import training_job

    job = read_job(
        {
            **training_job("fit", trainers=1, sampleset={"name": "imagenet"}),
            "metadata": {"name": "fit", "namespace": NS, "uid": "u1"},
        }
    )
    trainer = pods.pod(job, "trainer", 0, 0)
    (pref,) = trainer["spec"]["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert pref["preference"]["matchExpressions"] == [
        {"key": ss.cache_label(NS, "imagenet"), "operator": "Exists"}
    ]
    plain = pods.pod(
        read_job({**training_job("fit"), "metadata": {"name": "fit", "namespace": NS}}), "trainer", 0, 0
    )
    assert "affinity" not in plain["spec"] and all(v["name"] != "sampleset" for v in plain["spec"]["volumes"])
    env = {e["name"] for e in plain["spec"]["containers"][0]["env"]}
    assert "PADDLECLOUD_SAMPLESET_DIR" not in env


def test_what_cannot_work_says_what_to_change(kube: FakeKube, crd: dict[str, Any], tmp_path: Path) -> None:
    no_claim = KubernetesBackend(KubeSettings(), kube=kube_client(kube), data_dir=tmp_path)
    with pytest.raises(SampleSetsUnavailable, match="--kube-storage-claim"):
        no_claim.samplesets.ensure(ref(tmp_path))
    b = KubernetesBackend(KubeSettings(storage_claim="data"), kube=kube_client(kube), data_dir=tmp_path)
    with pytest.raises(SampleSetsUnavailable, match="not inside the platform's data directory"):
        b.samplesets.ensure(ref(tmp_path, source=Path("/elsewhere")))
    with pytest.raises(
        SampleSetsUnavailable, match=r"kubectl apply -f deploy/kubernetes/base/sampleset-crd\.yaml"
    ):
        b.samplesets.ensure(ref(tmp_path))  # the CRDs are not installed
    no_claim.close()
    b.close()


def test_the_crds_refuse_bad_samplejobs(kube: FakeKube, api: client.ApiClient, sampleset_crds: None) -> None:
    client.CoreV1Api(api).create_namespace({"metadata": {"name": NS}})
    custom = client.CustomObjectsApi(api)

    def samplejob(**spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": f"{G}/{V}",
            "kind": ss.JOB_KIND,
            "metadata": {"name": "x"},
            "spec": {"sampleSet": "imagenet", **spec},
        }

    for bad in ({"kind": "format"}, {"kind": "rmr", "path": "/etc"}, {}):
        with pytest.raises(client.ApiException) as err:
            custom.create_namespaced_custom_object(G, V, NS, ss.JOB_PLURAL, samplejob(**bad))
        assert err.value.status == 422, bad
    made = custom.create_namespaced_custom_object(G, V, NS, ss.JOB_PLURAL, samplejob(kind="warmup"))
    assert made["spec"]["path"] == ""  # the default


def test_the_resync_without_the_crds_does_nothing(kube: FakeKube, crd: dict[str, Any]) -> None:
    from paddlecloud.backends.kubernetes.sampleset_operator import SampleSetOperator

    op = SampleSetOperator(kube_client(kube))
    op.resync()  # the CRDs are not installed: no error, nothing written
    op.close()
    assert not [e for e in kube.errors if e[0] != "GET"]
