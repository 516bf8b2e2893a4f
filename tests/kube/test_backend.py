"""The API server's ``KubernetesBackend`` against the fake API server with the operator running:
start creates the TrainingJob and its token Secret; sync reports workers, why the job waits, and
how it ended; resize goes through the scale subresource (409 retried); stop deletes; logs come from
pods/log; nodes from the Nodes' allocatable; adopt takes over after a server restart."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from paddlecloud.backends.base import JobLaunch, JobStatus, LogRequest
from paddlecloud.backends.errors import BackendUnavailable, JobRejected, NotSupported
from paddlecloud.backends.images import RegistryAuth
from paddlecloud.backends.kubernetes.backend import KubernetesBackend
from paddlecloud.backends.kubernetes.settings import KubeSettings
from paddlecloud.core.envcontract import ApiAccess, JobFiles
from paddlecloud.core.phases import WorkerState
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import WorkerPlacement
from tests.kube.conftest import wait_for
from tests.kube.fakeapi import FakeKube
from tests.kube.helpers import G, P, kube_client, running_operator
from tests.kube.kubelet import Kubelet

NS = "paddlecloud-alice"
GI = 2**30


def launch(name: str = "fit", pservers: int = 1, trainers: int = 2, **kw: Any) -> JobLaunch:
    placement = [WorkerPlacement("pserver", i, "node-1") for i in range(pservers)]
    placement += [WorkerPlacement("trainer", i, "node-1") for i in range(trainers)]
    home = "/pfs/local/home/alice"
    defaults: dict[str, Any] = dict(
        key=f"alice/{name}",
        user="alice",
        name=name,
        framework="paddle-ps" if pservers else "none",
        entry="python train.py",
        package=Path("/unused"),
        output_dir=Path("/unused"),
        placement=tuple(placement),
        env={"LEARNING_RATE": "0.01"},
        files=JobFiles(output=f"{home}/jobs/{name}/output"),
        api=ApiAccess("http://paddlecloud-api:8080", "pcj_secret"),
        resources={"pserver": Resources(500, GI // 2), "trainer": Resources(1000, GI, 1)},
        package_path=f"{home}/jobs/{name}/package.tar.gz",
    )
    defaults.update(kw)
    return JobLaunch(**defaults)


@pytest.fixture
def backend(kube: FakeKube, crd: dict[str, Any]) -> Iterator[KubernetesBackend]:
    kube.add_node("node-1", cpu="16", memory="64Gi", gpu=4)
    with running_operator(kube):
        settings = KubeSettings(image="python:3.11-slim", grace_s=5)
        b = KubernetesBackend(settings, kube=kube_client(kube, "paddlecloud-server"))
        yield b
        b.close()


def pods(kube: FakeKube) -> set[str]:
    return {p["metadata"]["name"] for p in kube.list("pods", NS)}


def pod_uids(kube: FakeKube) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.list("pods", NS)}


def states(status: JobStatus) -> dict[str, WorkerState]:
    return {w.name: w.state for w in status.workers}


def test_start_creates_the_training_job_and_its_token_secret(
    kube: FakeKube, backend: KubernetesBackend
) -> None:
    backend.start(launch(trainer_range=(1, 4)))
    tj = kube.get(P, "fit", NS, group=G)
    spec, meta = tj["spec"], tj["metadata"]
    one_gpu = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"}
    assert meta["labels"]["paddlecloud.org/scheduler"] == "platform"
    assert meta["annotations"]["paddlecloud.org/key"] == "alice/fit"
    assert spec["package"] == {"path": "/pfs/local/home/alice/jobs/fit/package.tar.gz"}
    assert spec["platform"] == {"api": "http://paddlecloud-api:8080", "tokenSecret": "fit-job-token"}
    assert spec["trainer"] == {
        "replicas": 2,
        "min": 1,
        "max": 4,
        "resources": {"requests": one_gpu, "limits": one_gpu},  # limits = requests
    }
    assert spec["pserver"]["replicas"] == 1 and spec["env"] == {"LEARNING_RATE": "0.01"}
    assert kube.store.pruned == []  # everything the backend writes is in the CRD's schema
    secret = kube.get("secrets", "fit-job-token", NS)
    assert base64.b64decode(secret["data"]["token"]) == b"pcj_secret"
    assert len(base64.b64decode(secret["data"]["rendezvous"])) == 64  # PADDLECLOUD_RDZV_KEY (hex)
    assert secret["metadata"]["ownerReferences"][0]["uid"] == meta["uid"]
    assert next(e.reason for e in backend.sync("alice/fit").events) == "Created"


def test_sync_reports_why_it_waits_then_workers_then_success(
    kube: FakeKube, backend: KubernetesBackend, kubelet: Kubelet
) -> None:
    backend.start(launch())
    wait_for("the pserver pod", lambda: "fit-pserver-0" in pods(kube))
    kubelet.unschedulable(NS, "fit-pserver-0", "0/1 nodes are available: 1 Insufficient cpu.")
    events = wait_for(
        "a scheduling event", lambda: [e for e in backend.sync("alice/fit").events if e.type == "Warning"]
    )
    assert events[0].reason == "Unschedulable" and "pserver-0: 0/1 nodes" in events[0].message
    kubelet.run(NS, "fit-pserver-0")
    wait_for("trainer pods", lambda: {"fit-trainer-0", "fit-trainer-1"} <= pods(kube))
    for i in range(2):
        kubelet.run(NS, f"fit-trainer-{i}")
    status = wait_for(
        "all running",
        lambda: (
            (s := backend.sync("alice/fit"))
            and set(states(s).values()) == {WorkerState.RUNNING}
            and len(s.workers) == 3
            and s
        ),
    )
    trainer = next(w for w in status.workers if w.name == "trainer-1")
    assert trainer.node == "node-1" and trainer.endpoint.endswith(":6170") and trainer.role == "trainer"
    for i in range(2):
        kubelet.end(NS, f"fit-trainer-{i}", 0)
    wait_for(
        "the pserver stopped in place",
        lambda: kube.get("pods", "fit-pserver-0", NS)["spec"].get("activeDeadlineSeconds") == 1,
    )
    kubelet.end(NS, "fit-pserver-0", 137, reason="DeadlineExceeded")
    final = wait_for("finished", lambda: (s := backend.sync("alice/fit")).finished and s)
    assert final.failure is None
    assert states(final) == {
        "pserver-0": WorkerState.STOPPED,
        "trainer-0": WorkerState.SUCCEEDED,
        "trainer-1": WorkerState.SUCCEEDED,
    }


def test_a_failed_worker_fails_the_job_with_its_reason(
    kube: FakeKube, backend: KubernetesBackend, kubelet: Kubelet
) -> None:
    backend.start(launch(pservers=0, trainers=2))
    wait_for("trainers", lambda: len(pods(kube)) == 2)
    for i in range(2):
        kubelet.run(NS, f"fit-trainer-{i}")
    kubelet.end(NS, "fit-trainer-1", 2, log="Traceback: boom\n")
    status = wait_for("the failure", lambda: (s := backend.sync("alice/fit")).failure and s)
    assert "trainer-1" in str(status.failure) and states(status)["trainer-1"] == WorkerState.FAILED
    kubelet.end(NS, "fit-trainer-0", 137, reason="DeadlineExceeded")  # stopped by the operator
    assert wait_for("finished", lambda: backend.sync("alice/fit").finished)


def test_resize_goes_through_the_scale_subresource(kube: FakeKube, backend: KubernetesBackend) -> None:
    backend.start(launch(pservers=0, trainers=2, trainer_range=(1, 3)))
    kube.fail_next(
        "PATCH", r"/trainingjobs/fit/scale$", 409, agent="paddlecloud-server"
    )  # someone else wrote first: retried
    backend.add_trainer("alice/fit", WorkerPlacement("trainer", 2, "node-1"))
    assert kube.get(P, "fit", NS, group=G)["spec"]["trainer"]["replicas"] == 3
    assert [e for e in kube.errors if e[2] == 409]
    wait_for("trainer-2", lambda: "fit-trainer-2" in pods(kube))
    backend.remove_trainer("alice/fit", 5)
    backend.remove_trainer("alice/fit", 5)
    backend.remove_trainer("alice/fit", 5)  # never below min (1)
    assert kube.get(P, "fit", NS, group=G)["spec"]["trainer"]["replicas"] == 1
    wait_for("the highest trainers gone", lambda: pods(kube) == {"fit-trainer-0"})
    reasons = [e.reason for e in backend.sync("alice/fit").events]
    assert reasons.count("TrainerAdded") == 1 and reasons.count("TrainerRemoved") == 2
    with pytest.raises(NotSupported, match="does not support adding a pserver"):  # the contract's error
        backend.add_trainer("alice/fit", WorkerPlacement("pserver", 1, "node-1"))


def test_stop_deletes_the_job_and_its_pods(
    kube: FakeKube, backend: KubernetesBackend, kubelet: Kubelet
) -> None:
    backend.start(launch(pservers=0, trainers=1))
    wait_for("the trainer", lambda: "fit-trainer-0" in pods(kube))
    kubelet.run(NS, "fit-trainer-0")
    wait_for("running", lambda: states(backend.sync("alice/fit")) == {"trainer-0": WorkerState.RUNNING})
    backend.stop("alice/fit", 1)
    assert pods(kube) == set()  # stop returns once the pods are gone; the operator then lets the job go
    wait_for("the TrainingJob to go", lambda: kube.list(P, NS, group=G) == [])
    status = backend.sync("alice/fit")
    assert status.finished and status.failure is None and states(status) == {"trainer-0": WorkerState.STOPPED}
    backend.forget("alice/fit")
    assert backend.sync("alice/fit").failure == "the backend has no record of this job"


def test_logs_tail_follow_and_several_workers(
    kube: FakeKube, backend: KubernetesBackend, kubelet: Kubelet
) -> None:
    backend.start(launch(pservers=0, trainers=2))
    wait_for("trainers", lambda: len(pods(kube)) == 2)
    for i in range(2):
        kubelet.run(NS, f"fit-trainer-{i}", log=f"step 1 of trainer-{i}\nstep 2 of trainer-{i}\n")
    one = b"".join(backend.read_log(LogRequest("alice/fit", ("trainer-0",), tail=1)))
    assert one == b"step 2 of trainer-0\n"
    both = b"".join(backend.read_log(LogRequest("alice/fit", ("trainer-0", "trainer-1"))))
    assert b"[trainer-1] step 1 of trainer-1\n" in both and b"[trainer-0] step 2 of trainer-0\n" in both
    follow = backend.read_log(LogRequest("alice/fit", ("trainer-1",), follow=True))
    assert next(follow) == b"step 1 of trainer-1\n"
    kubelet.end("paddlecloud-alice", "fit-trainer-1", 0, log="done\n")
    assert list(follow) == [b"step 2 of trainer-1\n", b"done\n"]  # ends with the container


def test_previous_log_is_the_failed_runs_tail(
    kube: FakeKube, backend: KubernetesBackend, kubelet: Kubelet
) -> None:
    from paddlecloud.core.restarts import RestartPolicy, RestartRules

    rules = RestartRules(trainer=RestartPolicy.ON_FAILURE, backoff_s=0)
    backend.start(launch(pservers=0, trainers=1, restarts=rules))
    wait_for("the trainer", lambda: "fit-trainer-0" in pods(kube))
    kubelet.run(NS, "fit-trainer-0")
    first = kube.get("pods", "fit-trainer-0", NS)["metadata"]["uid"]
    status = {
        "phase": "Failed",
        "containerStatuses": [
            {
                "name": "worker",
                "ready": False,
                "restartCount": 0,
                "image": "x",
                "imageID": "",
                "state": {"terminated": {"exitCode": 1, "message": "line a\nline b"}},
            }
        ],
    }
    client.CoreV1Api(backend.kube.api).patch_namespaced_pod_status("fit-trainer-0", NS, {"status": status})
    # the failed pod is deleted and created again: between the two it is not there at all
    wait_for("run 1", lambda: pod_uids(kube).get("fit-trainer-0", first) != first)
    kubelet.run(NS, "fit-trainer-0")
    previous = b"".join(backend.read_log(LogRequest("alice/fit", ("trainer-0",), previous=True)))
    assert previous == b"line a\nline b\n"
    restarts = [e for e in backend.sync("alice/fit").events if e.reason == "WorkerRestarted"]
    assert restarts and "trainer-0 restarted as run 1" in restarts[0].message


def test_nodes_are_the_ready_nodes_allocatable(kube: FakeKube, backend: KubernetesBackend) -> None:
    kube.add_node("node-2", cpu="2500m", memory="8Gi")
    kube.call(
        lambda: (
            kube.store.objects[("", "nodes", "", "node-2")].setdefault("spec", {}).update(unschedulable=True)
        )
    )
    nodes = {n.name: n for n in backend.nodes()}
    assert set(nodes) == {"node-1"}  # node-2 is cordoned
    assert nodes["node-1"].capacity == Resources(16000, 64 * GI, 4) and nodes["node-1"].gpus == (0, 1, 2, 3)


def test_adopt_takes_over_without_creating_again(kube: FakeKube, backend: KubernetesBackend) -> None:
    backend.start(launch(pservers=0, trainers=1))
    uid = kube.get(P, "fit", NS, group=G)["metadata"]["uid"]
    secret = kube.get("secrets", "fit-job-token", NS)["data"]
    again = KubernetesBackend(KubeSettings(), kube=kube_client(kube))  # the server restarted
    again.adopt(launch(pservers=0, trainers=1, api=ApiAccess("http://paddlecloud-api:8080", "pcj_new")))
    assert kube.get(P, "fit", NS, group=G)["metadata"]["uid"] == uid
    assert not again.sync("alice/fit").failure
    assert kube.get("secrets", "fit-job-token", NS)["data"] == secret  # the pods' token and key


def test_a_secret_already_there_keeps_its_rendezvous_key(kube: FakeKube, backend: KubernetesBackend) -> None:
    """Pods may hold the key of a Secret whose creation's answer was lost: a start that finds its
    TrainingJob and Secret there already patches this start's token in and keeps the key."""
    backend.start(launch(pservers=0, trainers=1))
    before = kube.get("secrets", "fit-job-token", NS)["data"]
    again = KubernetesBackend(KubeSettings(), kube=kube_client(kube, "paddlecloud-server"))
    again.start(launch(pservers=0, trainers=1, api=ApiAccess("http://paddlecloud-api:8080", "pcj_new")))
    after = kube.get("secrets", "fit-job-token", NS)["data"]
    assert base64.b64decode(after["token"]) == b"pcj_new"
    assert after["rendezvous"] == before["rendezvous"]
    again.close()


def test_a_name_pods_cannot_carry_fails_the_start(backend: KubernetesBackend) -> None:
    with pytest.raises(JobRejected, match="DNS-1035"):  # the job fails with why (BackendRejected)
        backend.start(launch(name="9lives"))


def test_api_errors_say_what_kubernetes_said(kube: FakeKube, backend: KubernetesBackend) -> None:
    kube.fail_next("POST", r"/trainingjobs$", 500, agent="paddlecloud-server")
    with pytest.raises(BackendUnavailable, match=r"creating TrainingJob paddlecloud-alice/fit: .*\(500\)"):
        backend.start(launch(pservers=0, trainers=1))
    backend.start(launch(pservers=0, trainers=1))
    kube.fail_next("GET", r"/trainingjobs/fit$", 503, times=2, agent="paddlecloud-server")
    first, second = backend.sync("alice/fit"), backend.sync("alice/fit")
    assert [e.reason for e in first.events] == ["Created", "KubernetesUnreachable"] and second.events == ()
    assert not first.finished and first.failure is None  # an outage is no failure of the job
    kube.fail_next("GET", r"/trainingjobs/fit/scale$", 500, agent="paddlecloud-server")
    backend.remove_trainer("alice/fit", 1)  # never raises: the job keeps its trainers
    assert "ResizeFailed" in [e.reason for e in backend.sync("alice/fit").events]


def test_api_errors_become_the_contracts_error_kinds() -> None:
    from urllib3.exceptions import MaxRetryError

    from paddlecloud.backends.errors import BackendUnavailable, JobRejected
    from paddlecloud.backends.kubernetes.kube import backend_error

    forbidden = client.ApiException(status=403, reason="Forbidden")
    forbidden.body = '{"reason": "Forbidden", "message": "exceeded quota: compute, requested: cpu=8"}'
    got = backend_error(forbidden, "creating TrainingJob ns/fit")
    assert isinstance(got, JobRejected)
    assert (
        str(got) == "creating TrainingJob ns/fit: Forbidden (403): exceeded quota: compute, requested: cpu=8"
    )
    for transient in (
        client.ApiException(status=503, reason="Unavailable"),
        MaxRetryError(None, "/", "refused"),
    ):
        assert isinstance(backend_error(transient, "x"), BackendUnavailable)


def test_an_unreachable_api_server_is_transient_for_start_and_adopt(tmp_path: Path) -> None:
    from paddlecloud.backends.errors import BackendUnavailable

    with client.ApiClient(client.Configuration(host="http://127.0.0.1:9")) as api:  # nothing listens
        from paddlecloud.backends.kubernetes.kube import Kube

        b = KubernetesBackend(KubeSettings(namespace="jobs"), kube=Kube(api, 2.0))
        with pytest.raises(BackendUnavailable, match="creating TrainingJob jobs/alice-fit"):
            b.start(launch())
        with pytest.raises(BackendUnavailable, match="reading TrainingJob jobs/alice-fit"):
            b.adopt(launch())


def test_a_job_in_a_private_image_pulls_with_its_owners_login(
    kube: FakeKube, backend: KubernetesBackend
) -> None:
    auth = RegistryAuth("127.0.0.1:5001", "alice-bot", "pull-secret-value")
    backend.start(launch(pservers=0, trainers=1, image="127.0.0.1:5001/team/train:1", image_auth=auth))
    tj = kube.get(P, "fit", NS, group=G)
    assert (tj["spec"]["image"], tj["spec"]["imagePullSecret"]) == ("127.0.0.1:5001/team/train:1", "fit-pull")
    assert kube.store.pruned == []  # the CRD's schema has the field
    assert "pull-secret-value" not in json.dumps(tj)  # the TrainingJob names the Secret, holds nothing of it
    secret = kube.get("secrets", "fit-pull", NS)
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    assert secret["metadata"]["ownerReferences"][0]["uid"] == tj["metadata"]["uid"]  # deleted with the job
    config = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    entry = config["auths"]["127.0.0.1:5001"]
    assert (entry["username"], entry["password"]) == ("alice-bot", "pull-secret-value")
    assert base64.b64decode(entry["auth"]) == b"alice-bot:pull-secret-value"
    pod = wait_for(
        "the trainer pod",
        lambda: next((p for p in kube.list("pods", NS) if p["metadata"]["name"] == "fit-trainer-0"), None),
    )
    assert pod["spec"]["imagePullSecrets"] == [{"name": "fit-pull"}]
    assert {c["image"] for c in pod["spec"]["containers"]} == {"127.0.0.1:5001/team/train:1"}


def test_a_job_without_a_login_gets_no_pull_secret(kube: FakeKube, backend: KubernetesBackend) -> None:
    backend.start(launch(pservers=0, trainers=1, image="127.0.0.1:5000/team/train:1"))
    tj = kube.get(P, "fit", NS, group=G)
    assert "imagePullSecret" not in tj["spec"]
    assert "fit-pull" not in {s["metadata"]["name"] for s in kube.list("secrets", NS)}
