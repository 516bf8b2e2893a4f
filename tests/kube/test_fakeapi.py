"""The fake API server behaves as the real one where the contract tests rely on it, seen through the
real ``kubernetes`` client: metadata, 201, 409 without a change, watches from a resourceVersion and
410, selectors, /status and /scale, finalizers and garbage collection, pods/log, scripted failures."""

from __future__ import annotations

import json
import threading
import urllib.request
from typing import Any

import pytest
from kubernetes import client, watch

from tests.kube.fakeapi import FakeKube
from tests.kube.kubelet import Kubelet

G, V, P = "paddlecloud.org", "v1", "trainingjobs"


def _pod(name: str, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "x"}]},
    }


def _tj(name: str, replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": f"{G}/{V}",
        "kind": "TrainingJob",
        "metadata": {"name": name},
        "spec": {
            "user": "alice",
            "image": "python:3.11",
            "entry": "python t.py",
            "package": {"url": "http://x/p.tar.gz"},
            "trainer": {"replicas": replicas},
        },
    }


@pytest.fixture
def ns(api: client.ApiClient) -> str:
    client.CoreV1Api(api).create_namespace({"metadata": {"name": "ns1"}})
    return "ns1"


@pytest.fixture
def core(api: client.ApiClient, ns: str) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def custom(api: client.ApiClient, ns: str, crd: dict[str, Any]) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def test_create_fills_metadata_and_answers_201(core: client.CoreV1Api) -> None:
    _, status, _ = core.create_namespaced_pod_with_http_info("ns1", _pod("p1"))  # type: ignore[misc]
    assert status == 201
    pod = core.read_namespaced_pod("p1", "ns1")
    assert pod.metadata.uid and pod.metadata.creation_timestamp and pod.metadata.generation == 1
    assert int(pod.metadata.resource_version) > 0 and pod.status.phase == "Pending"
    with pytest.raises(client.ApiException) as exc:
        core.create_namespaced_pod("ns1", _pod("p1"))
    assert exc.value.status == 409 and "AlreadyExists" in str(exc.value.body)
    with pytest.raises(client.ApiException) as exc:
        core.create_namespaced_pod("nowhere", _pod("p2"))
    assert exc.value.status == 404


def test_invalid_objects_are_rejected(core: client.CoreV1Api) -> None:
    for bad in (
        _pod("Bad_Name"),
        {"metadata": {"name": "p"}, "spec": {"containers": []}},
        _pod("p", a="x y"),
    ):
        with pytest.raises(client.ApiException) as exc:
            core.create_namespaced_pod("ns1", bad)
        assert exc.value.status == 422


def test_list_get_patch_delete(core: client.CoreV1Api) -> None:
    for i in range(3):
        core.create_namespaced_pod("ns1", _pod(f"p{i}", app="a" if i < 2 else "b", tier=str(i)))
    assert {p.metadata.name for p in core.list_namespaced_pod("ns1", label_selector="app=a").items} == {
        "p0",
        "p1",
    }
    assert [p.metadata.name for p in core.list_namespaced_pod("ns1", label_selector="app!=a").items] == ["p2"]
    got = core.list_namespaced_pod("ns1", label_selector="tier in (0,2),app")
    assert [p.metadata.name for p in got.items] == ["p0", "p2"]
    assert [p.metadata.name for p in core.list_namespaced_pod("ns1", label_selector="!app").items] == []
    assert [
        p.metadata.name for p in core.list_namespaced_pod("ns1", field_selector="metadata.name=p1").items
    ] == ["p1"]
    assert len(core.list_pod_for_all_namespaces().items) == 3
    before = core.read_namespaced_pod("p0", "ns1")
    after = core.patch_namespaced_pod("p0", "ns1", {"metadata": {"labels": {"extra": "1"}}})
    assert after.metadata.labels == {"app": "a", "tier": "0", "extra": "1"}
    assert int(after.metadata.resource_version) > int(before.metadata.resource_version)
    assert after.metadata.generation == 1  # metadata only
    core.delete_namespaced_pod("p0", "ns1")
    assert len(core.list_namespaced_pod("ns1").items) == 2


def test_stale_resource_version_is_409_and_changes_nothing(core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("ns1", _pod("p1"))
    old = core.read_namespaced_pod("p1", "ns1")
    core.patch_namespaced_pod("p1", "ns1", {"metadata": {"labels": {"v": "1"}}})
    current = core.read_namespaced_pod("p1", "ns1")
    with pytest.raises(client.ApiException) as exc:
        core.patch_namespaced_pod(
            "p1",
            "ns1",
            {"metadata": {"resourceVersion": old.metadata.resource_version, "labels": {"v": "2"}}},
        )
    assert exc.value.status == 409
    old.metadata.labels = {"v": "3"}
    with pytest.raises(client.ApiException) as exc:
        core.replace_namespaced_pod("p1", "ns1", old)
    assert exc.value.status == 409
    unchanged = core.read_namespaced_pod("p1", "ns1")
    assert unchanged.metadata.labels == {"v": "1"}
    assert unchanged.metadata.resource_version == current.metadata.resource_version


def test_generation_counts_spec_changes_only(custom: client.CustomObjectsApi) -> None:
    custom.create_namespaced_custom_object(G, V, "ns1", P, _tj("job"))
    custom.patch_namespaced_custom_object(G, V, "ns1", P, "job", {"metadata": {"labels": {"a": "b"}}})
    custom.patch_namespaced_custom_object_status(G, V, "ns1", P, "job", {"status": {"phase": "Running"}})
    assert custom.get_namespaced_custom_object(G, V, "ns1", P, "job")["metadata"]["generation"] == 1
    custom.patch_namespaced_custom_object(G, V, "ns1", P, "job", {"spec": {"entry": "python u.py"}})
    assert custom.get_namespaced_custom_object(G, V, "ns1", P, "job")["metadata"]["generation"] == 2


def test_status_subresource_is_separate(custom: client.CustomObjectsApi) -> None:
    body = _tj("job")
    body["status"] = {"phase": "Running"}
    created = custom.create_namespaced_custom_object(G, V, "ns1", P, body)
    assert "status" not in created  # status is written only through /status
    custom.patch_namespaced_custom_object(G, V, "ns1", P, "job", {"status": {"phase": "Failed"}})
    custom.patch_namespaced_custom_object_status(
        G, V, "ns1", P, "job", {"spec": {"entry": "ignored"}, "status": {"phase": "Starting"}}
    )
    job = custom.get_namespaced_custom_object(G, V, "ns1", P, "job")
    assert job["status"]["phase"] == "Starting" and job["spec"]["entry"] == "python t.py"


def test_schema_defaults_prunes_and_validates(kube: FakeKube, custom: client.CustomObjectsApi) -> None:
    body = _tj("job")
    body["spec"]["unknownField"] = 1
    body["spec"]["pserver"] = {}  # defaults apply inside objects that exist
    job = custom.create_namespaced_custom_object(G, V, "ns1", P, body)
    assert "unknownField" not in job["spec"] and job["spec"]["pserver"]["replicas"] == 0
    assert ("TrainingJob/job", "spec.unknownField") in kube.store.pruned
    bad = _tj("bad")
    bad["spec"]["framework"] = "tensorflow"
    with pytest.raises(client.ApiException) as exc:
        custom.create_namespaced_custom_object(G, V, "ns1", P, bad)
    assert exc.value.status == 422 and "framework" in str(exc.value.body)


def test_scale_subresource(custom: client.CustomObjectsApi) -> None:
    custom.create_namespaced_custom_object(G, V, "ns1", P, _tj("job", replicas=2))
    scale = custom.get_namespaced_custom_object_scale(G, V, "ns1", P, "job")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 2
    out = custom.patch_namespaced_custom_object_scale(G, V, "ns1", P, "job", {"spec": {"replicas": 4}})
    assert out["spec"]["replicas"] == 4
    job = custom.get_namespaced_custom_object(G, V, "ns1", P, "job")
    assert job["spec"]["trainer"]["replicas"] == 4 and job["metadata"]["generation"] == 2
    stale = {"metadata": {"resourceVersion": scale["metadata"]["resourceVersion"]}, "spec": {"replicas": 3}}
    with pytest.raises(client.ApiException) as exc:
        custom.patch_namespaced_custom_object_scale(G, V, "ns1", P, "job", stale)
    assert exc.value.status == 409
    with pytest.raises(client.ApiException) as exc:  # the CRD's schema still applies: replicas >= 1
        custom.patch_namespaced_custom_object_scale(G, V, "ns1", P, "job", {"spec": {"replicas": 0}})
    assert exc.value.status == 422
    assert custom.get_namespaced_custom_object(G, V, "ns1", P, "job")["spec"]["trainer"]["replicas"] == 4


def test_watch_from_resource_version_and_410(kube: FakeKube, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("ns1", _pod("p1"))
    rv = core.list_namespaced_pod("ns1").metadata.resource_version
    core.create_namespaced_pod("ns1", _pod("p2", a="b"))
    core.patch_namespaced_pod("p1", "ns1", {"metadata": {"labels": {"a": "b"}}})
    core.delete_namespaced_pod("p2", "ns1")

    def events(**selectors: str) -> list[tuple[str, str]]:
        stream = watch.Watch().stream(
            core.list_namespaced_pod, "ns1", resource_version=rv, timeout_seconds=1, **selectors
        )
        return [(e["type"], e["object"].metadata.name) for e in stream]

    seen = events()
    assert seen == [("ADDED", "p2"), ("MODIFIED", "p1"), ("DELETED", "p2")]
    selected = events(label_selector="a=b")
    assert selected == [("ADDED", "p2"), ("ADDED", "p1"), ("DELETED", "p2")]  # p1 entered the selection
    kube.expire_watches()
    with pytest.raises(client.ApiException) as exc:
        list(watch.Watch().stream(core.list_namespaced_pod, "ns1", resource_version=rv))
    assert exc.value.status == 410


def test_live_watch_ends_with_410_when_expired(kube: FakeKube, core: client.CoreV1Api) -> None:
    rv = core.list_namespaced_pod("ns1").metadata.resource_version
    events: list[dict[str, Any]] = []

    def follow() -> None:
        url = f"{kube.url}/api/v1/namespaces/ns1/pods?watch=true&resourceVersion={rv}&timeoutSeconds=10"
        with urllib.request.urlopen(url, timeout=10) as resp:
            events.extend(json.loads(line) for line in resp)

    t = threading.Thread(target=follow)
    t.start()
    core.create_namespaced_pod("ns1", _pod("p1"))
    _wait(lambda: events or kube.store.listeners)
    kube.expire_watches()
    t.join(10)
    assert [e["type"] for e in events] == ["ADDED", "ERROR"] and events[-1]["object"]["code"] == 410


def _wait(cond: Any) -> None:
    import time

    deadline = time.monotonic() + 5
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_finalizers_hold_deletion(custom: client.CustomObjectsApi, core: client.CoreV1Api) -> None:
    body = _tj("job")
    body["metadata"]["finalizers"] = ["paddlecloud.org/cleanup"]
    job = custom.create_namespaced_custom_object(G, V, "ns1", P, body)
    owned = _pod("job-trainer-0")
    owned["metadata"]["ownerReferences"] = [
        {
            "apiVersion": f"{G}/{V}",
            "kind": "TrainingJob",
            "name": "job",
            "uid": job["metadata"]["uid"],
            "controller": True,
        }
    ]
    core.create_namespaced_pod("ns1", owned)
    custom.delete_namespaced_custom_object(G, V, "ns1", P, "job", propagation_policy="Background")
    held = custom.get_namespaced_custom_object(G, V, "ns1", P, "job")
    assert held["metadata"]["deletionTimestamp"] and core.read_namespaced_pod("job-trainer-0", "ns1")
    custom.patch_namespaced_custom_object(G, V, "ns1", P, "job", {"metadata": {"finalizers": None}})
    with pytest.raises(client.ApiException) as exc:
        custom.get_namespaced_custom_object(G, V, "ns1", P, "job")
    assert exc.value.status == 404
    assert core.list_namespaced_pod("ns1").items == []  # garbage-collected with its owner


def test_pod_logs(kube: FakeKube, core: client.CoreV1Api, kubelet: Kubelet) -> None:
    core.create_namespaced_pod("ns1", _pod("p1"))
    with pytest.raises(client.ApiException) as exc:  # not started yet
        core.read_namespaced_pod_log("p1", "ns1")
    assert exc.value.status == 400 and "waiting to start" in str(exc.value.body)
    kubelet.run("ns1", "p1", log="one\ntwo\n")
    assert core.read_namespaced_pod_log("p1", "ns1") == "one\ntwo\n"
    assert core.read_namespaced_pod_log("p1", "ns1", tail_lines=1) == "two\n"
    with pytest.raises(client.ApiException) as exc:
        core.read_namespaced_pod_log("p1", "ns1", previous=True)
    assert exc.value.status == 400
    resp = core.read_namespaced_pod_log("p1", "ns1", follow=True, _preload_content=False)
    kube.write_log("ns1", "p1", "three\n")
    kubelet.end("ns1", "p1", 0)
    assert resp.read() == b"one\ntwo\nthree\n"


def test_previous_log_after_a_restart(kube: FakeKube, core: client.CoreV1Api, kubelet: Kubelet) -> None:
    core.create_namespaced_pod("ns1", _pod("p1"))
    kubelet.run("ns1", "p1", log="first run\n")
    kube.write_log("ns1", "p1", "second run\n", new_run=True)
    core.patch_namespaced_pod_status(
        "p1",
        "ns1",
        {
            "status": {
                "containerStatuses": [
                    {
                        "name": "main",
                        "ready": True,
                        "restartCount": 1,
                        "image": "x",
                        "imageID": "",
                        "state": {"running": {}},
                        "lastState": {"terminated": {"exitCode": 1}},
                    }
                ]
            }
        },
    )
    assert core.read_namespaced_pod_log("p1", "ns1", previous=True) == "first run\n"
    assert core.read_namespaced_pod_log("p1", "ns1") == "second run\n"


def test_fail_next_answers_before_any_change(kube: FakeKube, core: client.CoreV1Api) -> None:
    core.create_namespaced_pod("ns1", _pod("p1"))
    kube.fail_next("PATCH", r"/pods/p1$", 409)
    with pytest.raises(client.ApiException) as exc:
        core.patch_namespaced_pod("p1", "ns1", {"metadata": {"labels": {"a": "b"}}})
    assert exc.value.status == 409
    assert not core.read_namespaced_pod("p1", "ns1").metadata.labels
    core.patch_namespaced_pod("p1", "ns1", {"metadata": {"labels": {"a": "b"}}})  # once only
    assert core.read_namespaced_pod("p1", "ns1").metadata.labels == {"a": "b"}


def test_discovery_follows_crds(api: client.ApiClient, crd: dict[str, Any]) -> None:
    groups = client.ApisApi(api).get_api_versions()
    assert "paddlecloud.org" in {g.name for g in groups.groups}
    with urllib.request.urlopen(f"{api.configuration.host}/apis/paddlecloud.org/v1") as resp:
        names = {r["name"] for r in json.load(resp)["resources"]}
    assert names == {"trainingjobs", "trainingjobs/status", "trainingjobs/scale"}
    client.ApiextensionsV1Api(api).delete_custom_resource_definition("trainingjobs.paddlecloud.org")
    with pytest.raises(client.ApiException) as exc:
        client.CustomObjectsApi(api).list_cluster_custom_object(G, V, P)
    assert exc.value.status == 404


def test_strategic_merge_patch_is_refused_on_custom_resources(
    kube: FakeKube, custom: client.CustomObjectsApi
) -> None:
    custom.create_namespaced_custom_object(G, V, "ns1", P, _tj("job"))
    req = urllib.request.Request(
        f"{kube.url}/apis/{G}/{V}/namespaces/ns1/{P}/job",
        method="PATCH",
        data=b'{"spec": {}}',
        headers={"Content-Type": "application/strategic-merge-patch+json"},
    )
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req)
    assert exc.value.code == 415
