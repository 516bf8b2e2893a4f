"""The TrainingJob CRD (``backends/kubernetes/crd.py``): the YAML in deploy/ is generated from it and up
to date, it validates as a built-in object, its schema is structural, and TrainingJobs (the examples,
what the tests reconcile) validate against its openAPIV3Schema with jsonschema."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from kube_helpers import VARIANTS, Cluster, training_job

from paddlecloud.backends.kubernetes import crd, sampleset_crd
from paddlecloud.backends.kubernetes.spec import problems, read_job

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "deploy/kubernetes/examples").glob("*.yaml"))


def strict_schema() -> dict[str, Any]:
    """The openAPIV3Schema with unknown fields refused (the API server prunes them silently, and
    ``kubectl`` rejects them with its default strict field validation)."""
    schema = copy.deepcopy(crd.manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"])

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object" and "properties" in node:
                node.setdefault("additionalProperties", False)
            for key, value in node.items():
                if key != "metadata":
                    close(value)
        elif isinstance(node, list):
            for item in node:
                close(item)

    close(schema)
    return schema


def drop_nulls(obj: Any) -> Any:
    """The API server prunes null values of non-nullable fields before validating."""
    if isinstance(obj, dict):
        return {k: drop_nulls(v) for k, v in obj.items() if v is not None}
    return obj


def check(obj: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(strict_schema()).validate(drop_nulls(obj))


def test_crd_yaml_is_up_to_date() -> None:
    path = ROOT / "deploy/kubernetes/base/crd.yaml"
    assert path.read_text() == crd.render_yaml(), "run: python -m paddlecloud.backends.kubernetes.crd"


@pytest.mark.parametrize("version", ["1.29", kubernetes_validate.latest_version()])
def test_crd_validates_as_a_builtin_object(version: str) -> None:
    kubernetes_validate.validate(crd.manifest(), version, strict=True)


def test_sampleset_crd_yaml_is_up_to_date() -> None:
    path = ROOT / "deploy/kubernetes/base/sampleset-crd.yaml"
    assert path.read_text() == sampleset_crd.render_yaml(), (
        "run: python -m paddlecloud.backends.kubernetes.sampleset_crd"
    )


@pytest.mark.parametrize("version", ["1.29", kubernetes_validate.latest_version()])
def test_sampleset_crds_validate_as_builtin_objects_and_are_structural(version: str) -> None:
    for manifest in sampleset_crd.manifests():
        kubernetes_validate.validate(manifest, version, strict=True)
        schema = manifest["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        assert _structural_errors(schema, manifest["spec"]["names"]["kind"]) == []


def _structural_errors(node: dict[str, Any], path: str) -> list[str]:
    """The parts of Kubernetes' structural-schema rules that matter here."""
    errors = []
    if "type" not in node and not node.get("x-kubernetes-int-or-string"):
        errors.append(f"{path}: no type")
    if "properties" in node and "additionalProperties" in node:
        errors.append(f"{path}: properties and additionalProperties together")
    for key in ("oneOf", "anyOf", "allOf"):
        for sub in node.get(key, ()):
            if node.get("x-kubernetes-int-or-string") and sub in ({"type": "integer"}, {"type": "string"}):
                continue
            if set(sub) - {"required"}:
                errors.append(f"{path}.{key}: only 'required' may appear inside (got {sorted(sub)})")
    for name, sub in node.get("properties", {}).items():
        errors += _structural_errors(sub, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(node.get(key), dict):
            errors += _structural_errors(node[key], f"{path}[{key}]")
    return errors


def test_schema_is_structural() -> None:
    schema = crd.manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert _structural_errors(schema, "") == []


def test_crd_names_and_subresources() -> None:
    spec = crd.manifest()["spec"]
    assert spec["names"]["shortNames"] == ["tj"] and spec["scope"] == "Namespaced"
    version = spec["versions"][0]
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.trainer.replicas",
        "statusReplicasPath": ".status.trainers.active",
        "labelSelectorPath": ".status.selector",
    }
    assert "status" in version["subresources"]
    assert [c["name"] for c in version["additionalPrinterColumns"]][:3] == ["Phase", "Pservers", "Trainers"]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_examples_validate_against_the_crd(path: Path) -> None:
    obj = yaml.safe_load(path.read_text())
    check(obj)
    assert problems(read_job(obj)) == []


def test_examples_exist() -> None:
    assert len(EXAMPLES) >= 2


def test_test_jobs_validate_against_the_crd() -> None:
    for spec in VARIANTS.values():
        check(training_job(**spec))


def test_status_written_by_reconcile_validates() -> None:
    c = Cluster(training_job(restartPolicy="OnFailure", restartBackoffSeconds=0))
    c.step()
    c.run("pserver-0", "pserver-1")
    c.step()
    c.exit("trainer-0", 3, message="boom")
    c.step()
    assert c.status["restartCount"] == 1
    check(c.job)


BAD = [
    ("framework", {"framework": "tensorflow"}),
    ("url and path", {"package": {"url": "https://x/p.tgz", "path": "/pfs/local/home/a/p.tgz"}}),
    ("no package source", {"package": {}}),
    ("not a pfs path", {"output": "/tmp/out"}),
    ("restart policy", {"restartPolicy": "Always"}),
    ("clean pod policy", {"cleanPodPolicy": "Some"}),
    ("quantity", {"trainer": {"replicas": 1, "resources": {"requests": {"cpu": "lots"}}}}),
    ("too many pservers", {"pserver": {"replicas": 65}}),
    ("exit code 0", {"retryExitCodes": [0]}),
    ("unknown field", {"trainers": 3}),
]


@pytest.mark.parametrize(("what", "change"), BAD, ids=[b[0] for b in BAD])
def test_bad_specs_are_refused(what: str, change: dict[str, Any]) -> None:
    with pytest.raises(jsonschema.ValidationError):
        check(training_job(**change))


def test_required_fields() -> None:
    job = training_job()
    del job["spec"]["user"]
    with pytest.raises(jsonschema.ValidationError, match="'user' is a required property"):
        check(job)


@pytest.mark.parametrize(
    ("name", "ok"),
    [("fit-a-line", True), ("a" * 52, True), ("a" * 53, False), ("9lives", False), ("Fit", False)],
)
def test_job_names(name: str, ok: bool) -> None:
    assert (crd.check_job_name(name) is None) is ok
