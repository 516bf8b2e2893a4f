"""Contract tests of the operator: kopf + the real client against the fake API server, pods moved
along by the test (no kubelet): pserver-first start, status, scale up / down, restarts per policy,
delete with the finalizer, a 409 retried, a watch that expired (410) restarted."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from tests.kube.conftest import wait_for
from tests.kube.fakeapi import FakeKube
from tests.kube.helpers import NS, G, P, V, training_job
from tests.kube.kubelet import Kubelet


def pods(kube: FakeKube, role: str | None = None) -> dict[str, dict[str, Any]]:
    sel = f"paddlecloud.org/role={role}" if role else ""
    return {p["metadata"]["name"]: p for p in kube.list("pods", NS, labels=sel)}


def job(kube: FakeKube, name: str = "job") -> dict[str, Any]:
    return kube.get(P, name, NS, group=G)


def phase(kube: FakeKube, name: str = "job") -> str:
    return str((job(kube, name).get("status") or {}).get("phase") or "")


def env(pod: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0]["env"]}


@pytest.mark.usefixtures("operator")
def test_pservers_start_first_then_trainers_and_status(
    kube: FakeKube, custom: client.CustomObjectsApi, kubelet: Kubelet
) -> None:
    custom.create_namespaced_custom_object(G, V, NS, P, training_job("job", pservers=2, trainers=2))
    wait_for("two pserver pods", lambda: len(pods(kube, "pserver")) == 2)
    assert pods(kube, "trainer") == {}  # trainers wait for the pservers
    assert "paddlecloud.org/cleanup" in job(kube)["metadata"]["finalizers"]
    names = {s["metadata"]["name"] for s in kube.list("services", NS)}
    assert names == {"job-pserver-0", "job-pserver-1", "job-trainers"}
    kubelet.run(NS, "job-pserver-0")
    wait_for("the wait reason", lambda: job(kube).get("status", {}).get("reason") == "WaitingForPservers")
    assert pods(kube, "trainer") == {}
    kubelet.run(NS, "job-pserver-1")
    trainers = wait_for("two trainer pods", lambda: len(pods(kube, "trainer")) == 2 and pods(kube, "trainer"))
    e = env(trainers["job-trainer-1"])
    assert e["PADDLECLOUD_PSERVER_ENDPOINTS"] == "job-pserver-0.ns1.svc:6170,job-pserver-1.ns1.svc:6170"
    assert e["PADDLE_TRAINER_ID"] == "1" and e["PADDLECLOUD_ROLE"] == "trainer"
    for name in trainers:
        kubelet.run(NS, name)
    wait_for("Running", lambda: phase(kube) == "Running")
    status = job(kube)["status"]
    assert status["pservers"]["ready"] == 2 and status["trainers"]["active"] == 2
    assert status["observedGeneration"] == job(kube)["metadata"]["generation"]
    for name in trainers:
        kubelet.end(NS, name, 0)
    wait_for("Succeeded", lambda: phase(kube) == "Succeeded")
    stopped = wait_for(
        "pservers stopped in place",
        lambda: all(p["spec"].get("activeDeadlineSeconds") == 1 for p in pods(kube, "pserver").values()),
    )
    assert stopped and len(pods(kube)) == 4  # every pod (and its log) stays: cleanPodPolicy None


@pytest.mark.usefixtures("operator")
def test_scale_up_and_down_highest_index_first(
    kube: FakeKube, custom: client.CustomObjectsApi, kubelet: Kubelet
) -> None:
    body = training_job("job", trainers=2)
    body["spec"]["trainer"].update(min=1, max=4)
    custom.create_namespaced_custom_object(G, V, NS, P, body)
    wait_for("two trainers", lambda: set(pods(kube)) == {"job-trainer-0", "job-trainer-1"})
    custom.patch_namespaced_custom_object_scale(G, V, NS, P, "job", {"spec": {"replicas": 4}})
    wait_for("four trainers", lambda: len(pods(kube)) == 4)
    for name in pods(kube):
        kubelet.run(NS, name)
    wait_for(
        "Running with 4", lambda: phase(kube) == "Running" and job(kube)["status"]["trainers"]["active"] == 4
    )
    deletes_before = sum(1 for m, _ in kube.requests if m == "DELETE")
    custom.patch_namespaced_custom_object_scale(G, V, NS, P, "job", {"spec": {"replicas": 1}})
    wait_for("one trainer left", lambda: set(pods(kube)) == {"job-trainer-0"})
    deleted = [path.rsplit("/", 1)[-1].split("?")[0] for m, path in kube.requests if m == "DELETE"]
    assert deleted[deletes_before:][:3] == ["job-trainer-3", "job-trainer-2", "job-trainer-1"]
    scale = custom.get_namespaced_custom_object_scale(G, V, NS, P, "job")
    assert scale["spec"]["replicas"] == 1
    wait_for("status follows", lambda: job(kube)["status"]["trainers"]["desired"] == 1)


@pytest.mark.usefixtures("operator")
def test_trainer_failure_restarts_per_policy_then_backoff_limit(
    kube: FakeKube, custom: client.CustomObjectsApi, kubelet: Kubelet
) -> None:
    body = training_job("job", trainers=2, restartPolicy="OnFailure", backoffLimit=1, restartBackoffSeconds=0)
    custom.create_namespaced_custom_object(G, V, NS, P, body)
    wait_for("trainers", lambda: len(pods(kube)) == 2)
    for name in pods(kube):
        kubelet.run(NS, name)
    wait_for("Running", lambda: phase(kube) == "Running")
    uid = pods(kube)["job-trainer-1"]["metadata"]["uid"]
    kubelet.end(NS, "job-trainer-1", 3, log="boom\n")

    def restarted() -> dict[str, Any] | None:
        pod = pods(kube).get("job-trainer-1")
        return pod if pod is not None and pod["metadata"]["uid"] != uid else None

    pod = wait_for("trainer-1 re-created", restarted)
    assert pod["metadata"]["labels"]["paddlecloud.org/run"] == "1" and env(pod)["PADDLECLOUD_RESTART"] == "1"
    status = job(kube)["status"]
    assert status["restartCount"] == 1 and status["workerRuns"] == {"trainer-1": 1}
    assert status["lastFailure"]["worker"] == "trainer-1" and status["lastFailure"]["exitCode"] == 3
    kubelet.run(NS, "job-trainer-1")
    kubelet.end(NS, "job-trainer-1", 3, log="boom again\n")
    wait_for("Failed", lambda: phase(kube) == "Failed")
    assert job(kube)["status"]["reason"] == "BackoffLimitExceeded"
    assert pods(kube)["job-trainer-1"]["status"]["phase"] == "Failed"  # kept, with its log
    assert client.CoreV1Api(custom.api_client).read_namespaced_pod_log("job-trainer-1", NS) == "boom again\n"


@pytest.mark.usefixtures("operator")
def test_never_policy_fails_the_job_at_once(
    kube: FakeKube, custom: client.CustomObjectsApi, kubelet: Kubelet
) -> None:
    custom.create_namespaced_custom_object(G, V, NS, P, training_job("job", trainers=1))
    wait_for("a trainer", lambda: "job-trainer-0" in pods(kube))
    kubelet.run(NS, "job-trainer-0")
    kubelet.end(NS, "job-trainer-0", 1)
    wait_for("Failed", lambda: phase(kube) == "Failed")
    assert job(kube)["status"]["reason"] == "WorkerFailed" and job(kube)["status"]["restartCount"] == 0


@pytest.mark.usefixtures("operator")
def test_delete_runs_the_finalizer(kube: FakeKube, custom: client.CustomObjectsApi, kubelet: Kubelet) -> None:
    custom.create_namespaced_custom_object(G, V, NS, P, training_job("job", pservers=1, trainers=1))
    wait_for("pserver", lambda: "job-pserver-0" in pods(kube))
    kubelet.run(NS, "job-pserver-0")
    wait_for("trainer", lambda: "job-trainer-0" in pods(kube))
    wait_for(
        "the finalizer", lambda: "paddlecloud.org/cleanup" in job(kube)["metadata"].get("finalizers", [])
    )
    custom.delete_namespaced_custom_object(G, V, NS, P, "job")

    wait_for("the TrainingJob to go", lambda: kube.list(P, NS, group=G) == [])
    assert pods(kube) == {} and kube.list("services", NS) == []
    deletes = [path for m, path in kube.requests if m == "DELETE" and "/pods/" in path]
    assert len(deletes) == 2  # the operator deleted the pods (with their grace), not only the GC


@pytest.mark.usefixtures("operator")
def test_a_conflict_is_retried(kube: FakeKube, custom: client.CustomObjectsApi) -> None:
    kube.fail_next("PATCH", r"/trainingjobs/job/status$", 409)
    custom.create_namespaced_custom_object(G, V, NS, P, training_job("job", trainers=1))
    wait_for("the status written after the conflict", lambda: phase(kube) in ("Pending", "Starting"))
    conflicts = [e for e in kube.errors if e[2] == 409 and e[1].endswith("/status")]
    assert len(conflicts) == 1
    assert "job-trainer-0" in pods(kube)
    # retried inside the same reconcile: not a failed one (a Warning on the job and a backoff)
    assert [e for e in kube.list("events", NS) if e["reason"] == "ReconcileFailed"] == []


def test_a_conflict_is_retried_on_a_fresh_read_within_one_reconcile(
    kube: FakeKube, custom: client.CustomObjectsApi
) -> None:
    from paddlecloud.backends.kubernetes.operator import Operator
    from tests.kube.helpers import kube_client

    custom.create_namespaced_custom_object(G, V, NS, P, training_job("job", trainers=1))
    kube.fail_next("PATCH", r"/trainingjobs/job/status$", 409)
    op = Operator(kube_client(kube, "paddlecloud-operator"))
    try:
        plan = op.reconcile(NS, "job")  # no kopf: one call, and it must not raise the 409
    finally:
        op.close()
    assert plan is not None and plan.status == job(kube)["status"]
    assert phase(kube) in ("Pending", "Starting")
    assert [e[2] for e in kube.errors] == [409]
    reads = [p for m, p in kube.requests if m == "GET" and p.split("?")[0].endswith(f"/{P}/job")]
    writes = [p for m, p in kube.requests if m == "PATCH" and p.endswith("/job/status")]
    assert (len(reads), len(writes)) == (2, 2)  # read, conflict; read again, written


@pytest.mark.usefixtures("operator")
def test_an_expired_watch_is_restarted(kube: FakeKube, custom: client.CustomObjectsApi) -> None:
    custom.create_namespaced_custom_object(G, V, NS, P, training_job("one", trainers=1))
    wait_for("the first job's pod", lambda: "one-trainer-0" in pods(kube))
    kube.expire_watches()  # every watch ends with ERROR 410; resuming from an old version is 410 too
    custom.create_namespaced_custom_object(G, V, NS, P, training_job("two", trainers=1))
    wait_for("the second job's pod, after the watch restarted", lambda: "two-trainer-0" in pods(kube))
    relists = [
        p for m, p in kube.requests if m == "GET" and p.startswith(f"/apis/{G}/{V}/{P}") and "watch" not in p
    ]
    assert len(relists) >= 2  # listed at start, and again after the 410


def test_a_failing_reconcile_is_reported_on_the_job(kube: FakeKube, custom: client.CustomObjectsApi) -> None:
    from kopf.testing import KopfRunner

    from paddlecloud.backends.kubernetes.operator import OperatorConfig, registry
    from tests.kube.helpers import kube_client

    kube.fail_next("POST", r"/namespaces/ns1/pods$", 500, times=2)
    reg = registry(kube_client(kube), OperatorConfig(resync_s=0))
    with KopfRunner(["run", "-A", "--standalone"], registry=reg, timeout=30):
        custom.create_namespaced_custom_object(G, V, NS, P, training_job("job", trainers=1))
        events = wait_for("a ReconcileFailed event", lambda: [
            e for e in kube.list("events", NS) if e["reason"] == "ReconcileFailed"])  # fmt: skip
        assert events[0]["type"] == "Warning" and "500" in events[0]["message"]
        assert events[0]["involvedObject"]["name"] == "job"
        wait_for("the pod, once the API server answers again", lambda: "job-trainer-0" in pods(kube))
