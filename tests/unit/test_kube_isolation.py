"""Isolation between users' jobs on Kubernetes, at the level of the objects the operator makes:

- each TrainingJob's NetworkPolicy (``backends/kubernetes/network.py``) validates strictly against the
  real Kubernetes schemas, is owned by its TrainingJob, is created before any pod, and, read with the
  NetworkPolicy rules (``netpol_model.py``), lets a job's pods reach only their own job, the platform
  API, DNS and what ``spec.network.egress`` names, and nothing but their own job reach them;
- every container's limits equal its requests (QoS Guaranteed when cpu and memory are given);
- an OOM-killed container is recognised (``status.oom_reason`` / ``oom_message``) and named in the
  job's failure.

No network plugin runs here: that a cluster enforces the policy is on paper (docs/kubernetes.md).
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest
from kube_helpers import VARIANTS, Cluster, training_job
from netpol_model import allowed, outside, pod
from test_kube_crd import check
from test_kube_objects import K8S_VERSIONS, objects, validate_builtin

from paddlecloud.backends.base import JobLaunch
from paddlecloud.backends.kubernetes import network, pods
from paddlecloud.backends.kubernetes.launch import requirements
from paddlecloud.backends.kubernetes.launch import training_job as launch_job
from paddlecloud.backends.kubernetes.settings import KubeSettings, egress_rule
from paddlecloud.backends.kubernetes.spec import read_job
from paddlecloud.backends.kubernetes.status import oom_message, oom_reason
from paddlecloud.backends.options import OptionError
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import WorkerPlacement

NS = "paddlecloud"
API = "http://paddlecloud-api.paddlecloud.svc:8080"


def policy(name: str = "fit", namespace: str = NS, **spec: Any) -> dict[str, Any]:
    job = training_job(name, **spec)
    job["metadata"]["namespace"] = namespace
    return network.network_policy(read_job(job))


def worker(job: str, role: str = "trainer", namespace: str = NS, ip: str = "10.244.0.10") -> Any:
    """A job pod as the policies see it: its labels (those ``pods.pod`` gives it)."""
    return pod(namespace, ip, **{"paddlecloud.org/job": job, "paddlecloud.org/role": role})


API_POD = pod(NS, "10.244.1.5", **{"app.kubernetes.io/name": "paddlecloud-api"})
DNS_POD = pod("kube-system", "10.244.0.2", **{"k8s-app": "kube-dns"})


# -- the NetworkPolicy: schema, ownership, order ----------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_network_policy_validates_strictly(variant: str, version: str) -> None:
    made = [o for o in objects(VARIANTS[variant]) if o["kind"] == "NetworkPolicy"]
    assert len(made) == 1
    validate_builtin(made[0], version)


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(
    "api", [API, "http://10.0.0.5:8080", "https://[fd00::5]:8443", "http://paddlecloud-api:8080",
            "https://api.example.org"],
)  # fmt: skip
def test_every_kind_of_api_url_and_extra_egress_validates(api: str, version: str) -> None:
    extra = [egress_rule("10.0.0.0/8"), egress_rule("169.254.20.10/32:53/UDP")]
    extra[0]["except"] = ["10.96.0.0/12"]
    made = policy(platform={"api": api, "tokenSecret": "t"}, network={"egress": extra})
    validate_builtin(made, version)


def test_an_unknown_field_in_a_network_policy_fails_strict_validation() -> None:
    made = policy()
    made["spec"]["egress"][0]["bogus"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(made, "1.29", strict=True)


def test_the_policy_selects_the_jobs_pods_and_is_owned_by_the_training_job() -> None:
    job = read_job(training_job())
    made = network.network_policy(job)
    assert made["metadata"]["name"] == "fit" and made["metadata"]["namespace"] == NS
    assert made["metadata"]["ownerReferences"] == [pods.owner_reference(job)]
    owner = made["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("TrainingJob", job.uid, True)
    assert made["spec"]["podSelector"] == {"matchLabels": {"paddlecloud.org/job": "fit"}}
    assert made["spec"]["policyTypes"] == ["Ingress", "Egress"]
    for role, index in ((pods.PSERVER, 0), (pods.TRAINER, 1)):  # the selector matches every pod of it
        labels = pods.pod(job, role, index, 0)["metadata"]["labels"]
        assert made["spec"]["podSelector"]["matchLabels"].items() <= labels.items()


def test_the_policy_is_created_before_any_pod_and_only_once() -> None:
    c = Cluster(training_job())
    kinds = [o["kind"] for o in c.step().create]
    assert kinds[0] == "NetworkPolicy" and kinds.count("NetworkPolicy") == 1
    assert "Pod" in kinds
    c.run("pserver-0", "pserver-1")
    assert "NetworkPolicy" not in [o["kind"] for o in c.step().create]  # observed: not again
    c.policies.clear()  # someone deleted it: the next reconcile makes it again
    assert [o["kind"] for o in c.step().create][:1] == ["NetworkPolicy"]


def test_a_deleted_job_does_not_recreate_its_policy() -> None:
    c = Cluster(training_job())
    c.step()
    c.policies.clear()
    c.job["metadata"]["deletionTimestamp"] = "2027-01-01T00:00:00Z"
    assert not any(o["kind"] == "NetworkPolicy" for o in c.step().create)


# -- what the policy lets through ------------------------------------------------------------------


def test_a_jobs_pods_reach_each_other_and_no_other_jobs_pods() -> None:
    policies = [policy("fit"), policy("other"), policy("bobs", namespace="paddlecloud-bob")]
    fit_a, fit_b = worker("fit", ip="10.244.0.11"), worker("fit", "pserver", ip="10.244.0.12")
    other = worker("other", "pserver", ip="10.244.0.21")
    bobs = worker("bobs", namespace="paddlecloud-bob", ip="10.244.0.31")
    twin = worker("fit", namespace="paddlecloud-bob", ip="10.244.0.32")  # same job name, elsewhere
    for port in (6170, 6171, 6172, 22, 8080):
        assert allowed(policies, fit_a, fit_b, port) and allowed(policies, fit_b, fit_a, port)
        for a, b in (
            (fit_a, other),
            (other, fit_a),
            (fit_a, bobs),
            (bobs, fit_a),
            (twin, fit_a),
            (fit_a, twin),
        ):
            assert not allowed(policies, a, b, port), (a, b, port)
    # and the model is not simply closed: without the policies the same connections get through
    assert allowed([], fit_a, other, 6170) and allowed([], bobs, fit_a, 6170)


def test_nothing_outside_the_job_connects_to_its_pods() -> None:
    policies = [policy("fit")]
    fit = worker("fit")
    for src in (API_POD, DNS_POD, pod(NS, "10.244.3.3"), outside("192.0.2.1")):
        assert not allowed(policies, src, fit, 6170)


def test_a_jobs_pods_reach_the_api_and_dns_and_nothing_else() -> None:
    policies = [policy("fit")]
    fit = worker("fit")
    assert allowed(policies, fit, API_POD, 8080)
    assert not allowed(policies, fit, API_POD, 5432)  # only the API's port
    postgres = pod(NS, "10.244.1.6", **{"app.kubernetes.io/name": "postgres"})
    assert not allowed(policies, fit, postgres, 5432) and not allowed(policies, fit, postgres, 8080)
    api_elsewhere = pod("other-team", "10.244.1.7", **{"app.kubernetes.io/name": "paddlecloud-api"})
    assert not allowed(policies, fit, api_elsewhere, 8080)  # the API of the URL's namespace only
    assert allowed(policies, fit, DNS_POD, 53, "UDP") and allowed(policies, fit, DNS_POD, 53, "TCP")
    assert not allowed(policies, fit, DNS_POD, 9153)  # CoreDNS's metrics: no
    for ip, port in (("169.254.169.254", 80), ("10.0.0.9", 443), ("203.0.113.7", 443), ("10.96.0.1", 443)):
        assert not allowed(policies, fit, outside(ip), port), (ip, port)  # metadata, the internet, ...


def test_an_api_named_outside_the_cluster_opens_its_port_at_public_addresses_only() -> None:
    """Found in review: a host named outside the cluster opened its port at every address, the
    metadata address and the cluster's own services among them."""
    policies = [policy("fit", platform={"api": "https://api.example.org", "tokenSecret": "t"})]
    fit = worker("fit")
    assert allowed(policies, fit, outside("203.0.113.7"), 443)  # where the name may lead
    for ip in ("169.254.169.254", "10.96.0.1", "10.244.1.6", "192.168.1.1", "172.17.0.1", "127.0.0.1"):
        assert not allowed(policies, fit, outside(ip), 443), ip
    assert not allowed(policies, fit, outside("203.0.113.7"), 80)


def test_spec_network_egress_opens_exactly_its_blocks_and_ports() -> None:
    extra = [
        egress_rule("10.0.0.9/32:443"),
        egress_rule("192.168.0.0/16"),
        egress_rule("169.254.20.10/32:53/UDP"),
    ]
    extra[1]["except"] = ["192.168.7.0/24"]
    policies = [policy("fit", network={"egress": extra})]
    fit = worker("fit")
    assert allowed(policies, fit, outside("10.0.0.9"), 443)
    assert not allowed(policies, fit, outside("10.0.0.9"), 80) and not allowed(
        policies, fit, outside("10.0.0.10"), 443
    )
    assert allowed(policies, fit, outside("192.168.1.1"), 5000)  # every port of the block
    assert not allowed(policies, fit, outside("192.168.7.1"), 5000)  # but not its exception
    assert allowed(policies, fit, outside("169.254.20.10"), 53, "UDP")  # a NodeLocal DNSCache
    assert not allowed(policies, fit, outside("169.254.20.10"), 53, "TCP")
    assert not allowed(policies, fit, worker("other"), 6170)  # other jobs stay closed


@pytest.mark.parametrize(
    ("url", "rule"),
    [
        (API, {"to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "paddlecloud"}},
                       "podSelector": {"matchLabels": {"app.kubernetes.io/name": "paddlecloud-api"}}}],
               "ports": [{"protocol": "TCP", "port": 8080}]}),
        ("http://pc.team-a.svc.cluster.local:9000/", {
            "to": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}},
                    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "pc"}}}],
            "ports": [{"protocol": "TCP", "port": 9000}]}),
        ("http://paddlecloud-api:8080", {"to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name":
                                                                                 "paddlecloud-api"}}}],
                                         "ports": [{"protocol": "TCP", "port": 8080}]}),
        ("http://10.0.0.5:8080", {"to": [{"ipBlock": {"cidr": "10.0.0.5/32"}}],
                                  "ports": [{"protocol": "TCP", "port": 8080}]}),
        ("https://[fd00::5]", {"to": [{"ipBlock": {"cidr": "fd00::5/128"}}],
                               "ports": [{"protocol": "TCP", "port": 443}]}),
        ("https://files.example.org/pkg.tar.gz", {"to": [{"ipBlock": dict(b)} for b in network.PUBLIC],
                                                  "ports": [{"protocol": "TCP", "port": 443}]}),
        ("http://files.example.org:99999/", None),
        ("", None),
    ],
)  # fmt: skip
def test_url_rules(url: str, rule: dict[str, Any] | None) -> None:
    assert network.url_rule(url) == rule


def test_a_package_url_is_reachable_too() -> None:
    made = policy(package={"url": "http://10.1.1.1:8000/pkg.tar.gz"}, platform={})
    assert allowed([made], worker("fit"), outside("10.1.1.1"), 8000)
    assert not allowed([made], worker("fit"), API_POD, 8080)  # no API in the spec: no rule for one


def test_a_hand_written_block_that_is_no_cidr_fails_the_job_before_any_object() -> None:
    c = Cluster(training_job(network={"egress": [{"cidr": "10.0.0.0/8", "except": ["nonsense"]}]}))
    plan = c.step()
    assert (c.status["phase"], c.status["reason"]) == ("Failed", "InvalidSpec")
    assert "'nonsense' is not a CIDR" in c.status["message"] and not plan.create


# -- --kube-egress: from up's option to spec.network.egress ---------------------------------------


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("10.0.0.0/8", {"cidr": "10.0.0.0/8"}),
        ("0.0.0.0/0:443", {"cidr": "0.0.0.0/0", "ports": [{"port": 443, "protocol": "TCP"}]}),
        ("169.254.20.10/32:53/UDP", {"cidr": "169.254.20.10/32", "ports": [{"port": 53, "protocol": "UDP"}]}),
        ("fd00::/8:443", {"cidr": "fd00::/8", "ports": [{"port": 443, "protocol": "TCP"}]}),
    ],
)
def test_egress_options_parse(text: str, rule: dict[str, Any]) -> None:
    assert egress_rule(text) == rule


@pytest.mark.parametrize(
    "bad", ["10.0.0.1", "10.0.0.1/8", "10.0.0.0/8:0", "10.0.0.0/8:70000", "x/8", "10.0.0.0/8:53/ICMP"]
)
def test_bad_egress_options_are_refused_naming_the_flag(bad: str) -> None:
    with pytest.raises(OptionError) as err:
        KubeSettings.from_options({"kube_egress": (bad,)})
    assert err.value.option == "--kube-egress"


def _launch(tmp_path: Any, **resources: Resources) -> JobLaunch:
    return JobLaunch(
        key="alice/fit", user="alice", name="fit", framework="paddle-ps", entry="python train.py",
        package=tmp_path / "p.tgz", output_dir=tmp_path,
        placement=(WorkerPlacement("pserver", 0, "n1"), WorkerPlacement("trainer", 0, "n1")),
        package_path="/pfs/local/home/alice/jobs/fit/package.tar.gz", resources=resources,
    )  # fmt: skip


def test_the_platform_writes_kube_egress_into_the_training_job(tmp_path: Any) -> None:
    settings = KubeSettings.from_options({"kube_egress": ("10.0.0.9/32:443",), "kube_namespace": "jobs"})
    tj = launch_job(_launch(tmp_path), settings, "local")
    assert tj["spec"]["network"] == {
        "egress": [{"cidr": "10.0.0.9/32", "ports": [{"port": 443, "protocol": "TCP"}]}]
    }
    check(tj)  # in the CRD's schema: the API server keeps it (nothing pruned)
    assert "network" not in launch_job(_launch(tmp_path), KubeSettings(namespace="jobs"), "local")["spec"]


@pytest.mark.parametrize(
    "network_spec",
    [{"egress": [{"cidr": "10.0.0.0/8", "bogus": 1}]}, {"egress": [{"ports": [{"port": 1}]}]},
     {"egress": [{"cidr": "10.0.0.0/8", "ports": [{"port": 0}]}]}, {"other": 1}],
    ids=["unknown-field", "no-cidr", "port-0", "unknown-key"],
)  # fmt: skip
def test_bad_network_specs_are_refused_by_the_crd(network_spec: dict[str, Any]) -> None:
    import jsonschema

    with pytest.raises(jsonschema.ValidationError):
        check(training_job(network=network_spec))


# -- limits = requests ------------------------------------------------------------------------------


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return [*obj["spec"].get("initContainers", []), *obj["spec"]["containers"]]


def _qos(obj: dict[str, Any]) -> str:
    """The pod's QoS class, by Kubernetes' rules (pkg/apis/core/helper/qos)."""
    res = [c.get("resources") or {} for c in _containers(obj)]
    if not any(r.get("requests") or r.get("limits") for r in res):
        return "BestEffort"
    for r in res:
        req, lim = r.get("requests") or {}, r.get("limits") or {}
        if any(lim.get(k) is None or lim[k] != req.get(k, lim[k]) for k in ("cpu", "memory")):
            return "Burstable"
    return "Guaranteed"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_container_is_limited_to_what_it_requests(variant: str) -> None:
    made = [o for o in objects(VARIANTS[variant]) if o["kind"] == "Pod"]
    assert made
    for p in made:
        role = p["metadata"]["labels"]["paddlecloud.org/role"]
        asked = role == "rendezvous" or bool(
            (training_job(**VARIANTS[variant])["spec"][role]).get("resources")
        )
        for c in _containers(p):
            res = c["resources"]
            assert res.get("limits") == res.get("requests"), (p["metadata"]["name"], c["name"])
            assert bool(res) == asked  # a role without resources gets none (the namespace's LimitRange)
        if role == "trainer":  # GPUs: requests = limits in the worker, none in the init containers
            expect_gpu = "nvidia.com/gpu" in str(VARIANTS[variant].get("trainer"))
            assert ("nvidia.com/gpu" in str(p["spec"]["containers"][0]["resources"])) == expect_gpu
            assert all("nvidia.com/gpu" not in str(c["resources"]) for c in p["spec"]["initContainers"])


def test_a_pod_with_cpu_and_memory_is_guaranteed() -> None:
    job = read_job(training_job())
    for role in (pods.PSERVER, pods.TRAINER):
        made = pods.pod(job, role, 0, 0)
        assert _qos(made) == "Guaranteed"
        assert made["spec"]["containers"][0]["resources"]["limits"] == pods.guaranteed(
            job.pserver if role == pods.PSERVER else job.trainer
        )
    rdzv = pods.pod(read_job(training_job(**VARIANTS["torch-elastic"])), pods.RENDEZVOUS, 0, 0)
    assert _qos(rdzv) == "Guaranteed"
    # the model of the QoS rules is not always "Guaranteed"
    assert (
        _qos({"spec": {"containers": [{"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}})
        == "Burstable"
    )


def test_a_limit_above_the_request_becomes_both() -> None:
    """Kubernetes refuses a request above its limit; a hand-written spec's larger limit is what the
    pod may use, so it is also what it reserves (never killed below what it was promised)."""
    limits = {"memory": "1Gi", "ephemeral-storage": "10Gi"}
    spec = {"replicas": 1, "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": limits}}
    job = read_job(training_job(trainer=spec))
    res = pods.pod(job, pods.TRAINER, 0, 0)["spec"]["containers"][0]["resources"]
    want = {"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "10Gi"}
    assert res == {"requests": want, "limits": want}
    validate_builtin(pods.pod(job, pods.TRAINER, 0, 0), "1.29")


def test_the_platform_asks_for_limits_equal_to_requests(tmp_path: Any) -> None:
    assert requirements(Resources(cpu_m=1500, memory=2 * 2**30, gpu=2)) == {
        "requests": {"cpu": "1500m", "memory": "2Gi", "nvidia.com/gpu": "2"},
        "limits": {"cpu": "1500m", "memory": "2Gi", "nvidia.com/gpu": "2"},
    }
    tj = launch_job(
        _launch(tmp_path, trainer=Resources(cpu_m=250, memory=512 * 2**20)), KubeSettings(), "local"
    )
    check(tj)
    res = pods.pod(read_job({**tj, "metadata": {**tj["metadata"], "uid": "u"}}), pods.TRAINER, 0, 0)
    assert res["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "250m", "memory": "512Mi"},
        "limits": {"cpu": "250m", "memory": "512Mi"},
    }


# -- OOMKilled --------------------------------------------------------------------------------------


def _terminated(reason: str, code: int) -> dict[str, Any]:
    return {"terminated": {"exitCode": code, "reason": reason, "finishedAt": "2027-01-01T00:00:00Z"}}


def test_an_oom_killed_worker_is_recognised_with_its_limit() -> None:
    made = pods.pod(read_job(training_job()), pods.TRAINER, 0, 0)
    made["status"] = {
        "phase": "Failed",
        "containerStatuses": [{"name": "worker", "state": _terminated("OOMKilled", 137)}],
    }
    assert oom_reason(made["status"]) == "OOMKilled"
    assert (
        oom_message(made)
        == "container worker went over its memory limit (1Gi) and was killed (exit code 137)"
    )


def test_an_oom_killed_install_step_is_recognised_too() -> None:
    made = pods.pod(read_job(training_job()), pods.PSERVER, 0, 0)
    made["status"] = {
        "phase": "Failed",
        "initContainerStatuses": [
            {"name": "fetch", "state": _terminated("Completed", 0)},
            {"name": "install", "state": _terminated("OOMKilled", 137)},
        ],
        "containerStatuses": [{"name": "worker", "state": {"waiting": {"reason": "PodInitializing"}}}],
    }
    assert oom_reason(made["status"]) == "OOMKilled"
    assert (
        oom_message(made)
        == "container install went over its memory limit (512Mi) and was killed (exit code 137)"
    )


@pytest.mark.parametrize(
    "status",
    [
        {"phase": "Failed", "containerStatuses": [{"name": "worker", "state": _terminated("Error", 137)}]},
        {"phase": "Running", "containerStatuses": [{"name": "worker", "state": {"running": {}}}]},
        {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."},
        {"phase": "Pending"},
        {},
    ],
    ids=["killed-otherwise", "running", "evicted", "pending", "empty"],
)
def test_nothing_else_is_an_oom_kill(status: dict[str, Any]) -> None:
    assert oom_reason(status) is None
    assert oom_message({"spec": {}, "status": status}) is None


def test_a_previous_run_killed_for_memory_counts() -> None:
    status = {
        "containerStatuses": [
            {"name": "worker", "state": {"running": {}}, "lastState": _terminated("OOMKilled", 137)}
        ]
    }
    assert oom_reason(status) == "OOMKilled"


def test_an_oom_killed_trainer_fails_the_job_saying_so() -> None:
    c = Cluster(training_job(framework="none", pserver={"replicas": 0}, trainer={"replicas": 1}))
    c.step()
    c.run("trainer-0")
    c.step()
    c.exit("trainer-0", 137, reason="OOMKilled", message="Killed")
    c.step()
    st = c.status
    assert (st["phase"], st["reason"]) == ("Failed", "WorkerFailed")
    assert "[OOMKilled]" in st["message"]
    assert st["lastFailure"]["reason"] == "OOMKilled" and st["lastFailure"]["exitCode"] == 137
