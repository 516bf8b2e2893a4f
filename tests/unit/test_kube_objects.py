"""The Pods, Services and PodGroup of a TrainingJob (``backends/kubernetes/pods.py``): the env contract
is the local backend's, and every generated built-in object validates against the real Kubernetes
schemas (``kubernetes-validate``, strict: unknown fields fail, and so does a missing schema)."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from kube_helpers import VARIANTS, training_job

from paddlecloud.backends.kubernetes import network, pods
from paddlecloud.backends.kubernetes.objects import reconcile
from paddlecloud.backends.kubernetes.spec import read_job
from paddlecloud.core.envcontract import ApiAccess, JobFiles, WorkerContext, worker_env

#: the oldest Kubernetes the manifests are meant for, and the newest schema kubernetes-validate has
K8S_VERSIONS = ("1.29", kubernetes_validate.latest_version())


def objects(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Every object the job would ever create: its NetworkPolicy, services, PodGroup, and each
    worker's pod."""
    job = read_job(training_job(**spec))
    out = [network.network_policy(job), *pods.services(job), pods.podgroup(job)]
    out += [pods.pod(job, pods.PSERVER, i, 0) for i in range(job.pserver.replicas)]
    out += [pods.pod(job, pods.TRAINER, i, 1) for i in range(job.trainers)]
    if job.elastic_torch:
        out.append(pods.pod(job, pods.RENDEZVOUS, 0, 0))
    return out


def validate_builtin(obj: dict[str, Any], version: str) -> None:
    """Strict validation; a kind without a schema is a failure, not the CLI's warning."""
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.SchemaNotFoundError as exc:
        pytest.fail(exc.message)


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_generated_builtin_object_validates(variant: str, version: str) -> None:
    for obj in objects(VARIANTS[variant]):
        if obj["kind"] == "PodGroup":
            continue  # Volcano's CRD, not built in: checked below
        validate_builtin(obj, version)


def test_a_missing_schema_fails() -> None:
    with pytest.raises(pytest.fail.Exception, match="Couldn't find schema"):
        validate_builtin({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup"}, "1.29")


def test_an_unknown_field_fails_strict_validation() -> None:
    pod = objects({})[-1]
    pod["spec"]["containers"][0]["bogus"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, "1.29", strict=True)


def test_podgroup_shape() -> None:
    group = next(o for o in objects(VARIANTS["volcano-kueue"]) if o["kind"] == "PodGroup")
    assert group["kind"] == "PodGroup" and group["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert group["spec"] == {"minMember": 2, "queue": "q", "priorityClassName": "high"}
    assert group["metadata"]["ownerReferences"][0]["kind"] == "TrainingJob"


def env_of(pod: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["spec"]["containers"][0]["env"]}


def test_env_is_the_local_contract_with_dns_endpoints() -> None:
    job = read_job(training_job())
    env = env_of(pods.pod(job, pods.TRAINER, 1, 2))
    expected = worker_env(
        WorkerContext(
            job_name="fit", user="alice", framework="paddle-ps", role="trainer", index=1,
            topology=pods.topology(job), output_dir="/pfs/local/home/alice/jobs/fit/output", restart=2,
            files=JobFiles(output="/pfs/local/home/alice/jobs/fit/output"),
            api=ApiAccess(url="http://paddlecloud-api.paddlecloud.svc:8080"),
        )
    )  # fmt: skip
    pod_ip = {"fieldRef": {"fieldPath": "status.podIP"}}
    expected.update(POD_IP=pod_ip, PADDLECLOUD_POD_IP=pod_ip, PADDLECLOUD_ENTRY="python train.py")
    expected["HOME"] = "/paddlecloud/home"  # writable for any image user
    expected["PADDLECLOUD_JOB_TOKEN"] = {"secretKeyRef": {"name": "fit-job-token", "key": "token"}}
    assert env == expected  # no rendezvous key: not an elastic torch job
    assert env["PADDLECLOUD_PSERVER_ENDPOINTS"] == (
        "fit-pserver-0.paddlecloud.svc:6170,fit-pserver-1.paddlecloud.svc:6170"
    )
    assert env["PADDLECLOUD_TRAINER_ENDPOINTS"] == (
        "trainer-0.fit-trainers.paddlecloud.svc:6170,trainer-1.fit-trainers.paddlecloud.svc:6170"
    )
    assert env["PADDLE_GLOO_HTTP_ENDPOINT"] == "fit-pserver-0.paddlecloud.svc:6171"
    assert env["PADDLECLOUD_RESTART"] == "2"


def test_user_env_wins_and_reaches_the_install_step() -> None:
    job = read_job(training_job(env={"POD_IP": "1.2.3.4", "PIP_INDEX_URL": "http://mirror/simple"}))
    pod = pods.pod(job, pods.PSERVER, 0, 0)
    assert env_of(pod)["POD_IP"] == "1.2.3.4"
    install = pod["spec"]["initContainers"][1]
    assert {"name": "PIP_INDEX_URL", "value": "http://mirror/simple"} in install["env"]


def test_torch_and_gpus() -> None:
    job = read_job(training_job(**VARIANTS["torch-gpu"]))
    pod = pods.pod(job, pods.TRAINER, 1, 0)
    env = env_of(pod)
    assert env["MASTER_ADDR"] == "trainer-0.fit-trainers.paddlecloud.svc" and env["MASTER_PORT"] == "6172"
    assert (env["RANK"], env["WORLD_SIZE"]) == ("1", "2")
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1" and "NVIDIA_VISIBLE_DEVICES" not in env
    res = pod["spec"]["containers"][0]["resources"]
    assert res == {
        "requests": {"cpu": "4", "nvidia.com/gpu": "2"},
        "limits": {"cpu": "4", "nvidia.com/gpu": "2"},
    }  # strings, as Pods take them; limits = requests
    for init in pod["spec"]["initContainers"]:
        assert init["resources"] == {"requests": {"cpu": "4"}, "limits": {"cpu": "4"}}
    assert pod["spec"]["hostname"] == "trainer-1" and pod["spec"]["subdomain"] == "fit-trainers"


def test_elastic_torch_has_a_rendezvous_pod_the_trainers_wait_for() -> None:
    job = read_job(training_job(**VARIANTS["torch-elastic"]))
    env = env_of(pods.pod(job, pods.TRAINER, 0, 0))
    assert env["PET_RDZV_ENDPOINT"] == "fit-rendezvous.paddlecloud.svc:6172" and env["PET_NNODES"] == "1:4"
    # the key that signs the rendezvous state: from the job's Secret, written once with the job
    key = {"name": "fit-job-token", "key": "rendezvous", "optional": True}
    assert env["PADDLECLOUD_RDZV_KEY"] == {"secretKeyRef": key}
    assert "PADDLECLOUD_RDZV_KEY" not in env_of(pods.pod(job, pods.RENDEZVOUS, 0, 0))  # the store
    wait = pods.pod(job, pods.TRAINER, 0, 0)["spec"]["initContainers"][2]
    assert wait["command"][-1] == "fit-rendezvous.paddlecloud.svc:6172"
    plan = reconcile(training_job(**VARIANTS["torch-elastic"]), [], [], 0.0)
    assert [o["metadata"]["name"] for o in plan.create] == [
        "fit",  # the NetworkPolicy
        "fit-trainers",
        "fit-rendezvous",
        "fit-rendezvous",
    ]
    assert not plan.trainers_may_start


def test_pfs_mounts_the_users_home_at_its_own_path() -> None:
    job = read_job(training_job(input="/pfs/local/home/bob/shared/data"))
    mounts = pods.pod(job, pods.TRAINER, 0, 0)["spec"]["containers"][0]["volumeMounts"]
    assert mounts == [
        {"name": "workspace", "mountPath": "/paddlecloud"},
        {"name": "pfs", "mountPath": "/pfs/local/home/alice", "subPath": "pfs/files/home/alice"},
        {"name": "pfs", "mountPath": "/pfs/local/public", "subPath": "pfs/files/public", "readOnly": True},
        {"name": "pfs", "mountPath": "/pfs/local/home/bob/shared/data",
         "subPath": "pfs/files/home/bob/shared/data", "readOnly": True},
    ]  # fmt: skip


def test_package_url_and_labels() -> None:
    job = read_job(training_job(scheduling={"queue": "team-a"}))
    pod = pods.pod(job, pods.PSERVER, 0, 0)
    fetch = pod["spec"]["initContainers"][0]
    assert {"name": "PADDLECLOUD_PACKAGE_URL", "value": (
        "http://paddlecloud-api.paddlecloud.svc:8080/api/v1/pfs/file?path=/pfs/local/home/alice/jobs/fit/package.tar.gz"
    )} in fetch["env"]  # fmt: skip
    assert pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "0a1b2c3d-0000-4000-8000-000000000001"
    assert pod["spec"]["containers"][0]["readinessProbe"]["tcpSocket"] == {"port": 6170}
    assert [p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]] == [6170, 6171]


# -- confinement (docs/security.md): what a job's pod may reach ------------------------------------


def _pods(variant: str) -> list[dict[str, Any]]:
    return [o for o in objects(VARIANTS[variant]) if o["kind"] == "Pod"]


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod["spec"].get("initContainers", []), *pod["spec"]["containers"]]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_pod_runs_without_credentials_privileges_or_host_access(variant: str) -> None:
    for pod in _pods(variant):
        spec = pod["spec"]
        assert spec["automountServiceAccountToken"] is False  # no Kubernetes API token inside
        assert spec["enableServiceLinks"] is False
        assert not {"hostNetwork", "hostPID", "hostIPC", "nodeName", "serviceAccountName"} & set(spec)
        security = spec["securityContext"]
        assert security["runAsNonRoot"] is True and security["runAsUser"] > 0 and security["runAsGroup"] > 0
        assert security["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in _containers(pod):
            assert c["securityContext"] == {
                "allowPrivilegeEscalation": False,
                "capabilities": {"drop": ["ALL"]},
            }
        for volume in spec["volumes"]:  # a scratch dir and the PFS claim: never a host path
            assert set(volume) - {"name"} in ({"emptyDir"}, {"persistentVolumeClaim"}), volume


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_pfs_reaches_a_pod_only_as_the_users_home_public_and_named_places(variant: str) -> None:
    """The claim holds every user's files (and, with the deploy's layout, the API server's data): a
    pod mounts only subPaths of it: its user's home read-write, public read-only, its input
    read-only and its output, when those lie elsewhere. Init containers never see PFS."""
    spec = VARIANTS[variant]
    job = training_job(**spec)["spec"]
    home, public = "pfs/files/home/alice", "pfs/files/public"
    named = {
        f"pfs/files/{p.removeprefix('/pfs/local/')}": ro
        for p, ro in ((job.get("input"), True), (job.get("output"), False))
        if p and not p.startswith(("/pfs/local/home/alice/", "/pfs/local/public/"))
    }
    for pod in _pods(variant):
        for c in pod["spec"].get("initContainers", []):
            assert all(m["name"] != "pfs" for m in c.get("volumeMounts", [])), c["name"]
        mounts = [m for m in pod["spec"]["containers"][0]["volumeMounts"] if m["name"] == "pfs"]
        if job.get("storage") is None:
            assert mounts == []
            continue
        seen = {m["subPath"]: m.get("readOnly", False) for m in mounts}
        assert all(m.get("subPath") for m in mounts)  # never the claim's root
        assert seen == {home: False, public: True, **named}


def test_a_pod_of_bob_mounts_bobs_home_and_no_one_elses() -> None:
    job = read_job(training_job(user="bob", output="/pfs/local/home/bob/jobs/fit/output"))
    mounts = {
        m["mountPath"]: m for m in pods.pod(job, pods.TRAINER, 0, 0)["spec"]["containers"][0]["volumeMounts"]
    }
    assert mounts["/pfs/local/home/bob"]["subPath"] == "pfs/files/home/bob"
    assert not any("alice" in m.get("subPath", "") for m in mounts.values())


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_a_per_user_job_namespace_enforces_restricted_pod_security(version: str) -> None:
    ns = pods.namespace("paddlecloud-alice")
    validate_builtin(ns, version)
    labels = ns["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels["app.kubernetes.io/managed-by"] == "paddlecloud"
