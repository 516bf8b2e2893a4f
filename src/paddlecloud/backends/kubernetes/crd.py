"""The ``TrainingJob`` custom resource: names, labels, and the CRD manifest built as a Python dict.

    crd.manifest() ──▶ dict (apiextensions.k8s.io/v1 CustomResourceDefinition)
        ├─▶ render_yaml() ──▶ deploy/kubernetes/base/crd.yaml   (``python -m ...crd`` writes it;
        │                                                        a test fails while it is stale)
        └─▶ spec_schema() ──▶ jsonschema validation of example TrainingJobs in the tests

The openAPIV3Schema is *structural* (every field typed, no unknown fields kept), so the API server
prunes and validates what users write; rules JSON Schema cannot say are CEL
(``x-kubernetes-validations``), checked by the API server only. Pure: no Kubernetes client.
Field meanings: ``docs/kubernetes.md``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml

from paddlecloud.api.adaptive import MAX_BATCH, LrRule

__all__ = [
    "API_VERSION",
    "CLEAN_POD_POLICIES",
    "FINALIZER",
    "FRAMEWORKS",
    "GROUP",
    "KIND",
    "LABEL_INDEX",
    "LABEL_JOB",
    "LABEL_MANAGED_BY",
    "LABEL_ROLE",
    "LABEL_RUN",
    "LABEL_USER",
    "MANAGED_BY",
    "MAX_JOB_NAME",
    "NAME",
    "PHASES",
    "PLURAL",
    "RESTART_POLICIES",
    "SECRET_RENDEZVOUS_KEY",
    "SHORT_NAME",
    "SINGULAR",
    "VERSION",
    "check_job_name",
    "generated_header",
    "manifest",
    "render_yaml",
    "spec_schema",
    "write_yaml",
]

GROUP = "paddlecloud.org"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TrainingJob"
PLURAL = "trainingjobs"
SINGULAR = "trainingjob"
SHORT_NAME = "tj"
NAME = f"{PLURAL}.{GROUP}"
FINALIZER = f"{GROUP}/cleanup"

#: the key of the job's token Secret (``tokenSecret``) that holds its rendezvous key (elastic
#: torch: ``PADDLECLOUD_RDZV_KEY``, ``runtime.torchelastic``); key "token" holds the job token
SECRET_RENDEZVOUS_KEY = "rendezvous"

LABEL_JOB = f"{GROUP}/job"
LABEL_USER = f"{GROUP}/user"
LABEL_ROLE = f"{GROUP}/role"
LABEL_INDEX = f"{GROUP}/index"
LABEL_RUN = f"{GROUP}/run"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "paddlecloud"

FRAMEWORKS = ("paddle-ps", "paddle-collective", "torch", "none")
RESTART_POLICIES = ("Never", "OnFailure", "ExitCode")
CLEAN_POD_POLICIES = ("None", "Running", "All")
PHASES = ("Pending", "Starting", "Running", "Succeeded", "Failed")

#: the longest job name whose object names stay DNS labels: ``<job>-pserver-63``, ``<job>-rendezvous``
MAX_JOB_NAME = 52
_DNS1035 = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_QUANTITY = r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+|[KMGTPE]i?|[numkMGTPE])?$"
_PFS = "^/pfs/"

Schema = dict[str, Any]


def check_job_name(name: str) -> str | None:
    """Why ``name`` cannot be a TrainingJob's name on Kubernetes, or None when it can."""
    if len(name) > MAX_JOB_NAME:
        return f"job name {name!r} is longer than {MAX_JOB_NAME} characters (pod and service names)"
    if not re.fullmatch(_DNS1035, name):
        return f"job name {name!r} must start with a letter and hold only a-z, 0-9 and '-' (DNS-1035)"
    return None


# -- schema building blocks ---------------------------------------------------------------------


def _str(desc: str, **kw: Any) -> Schema:
    return {"type": "string", "description": desc, **kw}


def _int(desc: str, **kw: Any) -> Schema:
    return {"type": "integer", "format": "int32", "description": desc, **kw}


def _obj(
    desc: str,
    props: dict[str, Schema],
    required: tuple[str, ...] = (),
    rules: list[tuple[str, str]] | None = None,
    **kw: Any,
) -> Schema:
    """An object schema; ``rules``: CEL ``(rule, message)`` pairs; ``kw``: more keywords (``oneOf``)."""
    out: Schema = {"type": "object", "description": desc, "properties": props, **kw}
    if required:
        out["required"] = list(required)
    if rules:
        out["x-kubernetes-validations"] = [{"rule": r, "message": m} for r, m in rules]
    return out


def _quantity() -> Schema:
    return {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": _QUANTITY,
        "x-kubernetes-int-or-string": True,
    }


def _resources() -> Schema:
    amounts = {"type": "object", "additionalProperties": _quantity()}
    return _obj(
        "Kubernetes resource requirements of each pod of the role (cpu, memory, nvidia.com/gpu, ...); "
        "an extended resource in requests only is copied to limits",
        {
            "requests": {**amounts, "description": "what the scheduler reserves"},
            "limits": {**amounts, "description": "the most the pod may use; GPUs go here"},
        },
    )


def _restart_policy(desc: str) -> Schema:
    return _str(desc, enum=list(RESTART_POLICIES))


def _pserver() -> Schema:
    return _obj(
        "parameter servers: stable pods <job>-pserver-<i>, each with a headless Service",
        {
            "replicas": _int("number of pservers", minimum=0, maximum=64, default=0),
            "resources": _resources(),
            "restartPolicy": _restart_policy("restart policy of pservers (default Never)"),
        },
    )


def _trainer() -> Schema:
    return _obj(
        "trainers: indexed pods <job>-trainer-<i>",
        {
            "replicas": _int("desired trainers (the scale subresource)", minimum=1, maximum=512, default=1),
            "min": _int("elastic lower bound (default: replicas)", minimum=1, maximum=512),
            "max": _int("elastic upper bound (default: replicas)", minimum=1, maximum=512),
            "resources": _resources(),
        },
        rules=[
            ("!has(self.min) || self.min <= self.replicas", "trainer.min must be at most trainer.replicas"),
            ("!has(self.max) || self.replicas <= self.max", "trainer.replicas must be at most trainer.max"),
        ],
    )


def _package() -> Schema:
    return _obj(
        "the job package (tar.gz): exactly one of url and path",
        {
            "url": _str("an http(s) URL, fetched with the job token as Bearer", pattern="^https?://"),
            "path": _str("a PFS path, fetched from the platform's file service", pattern=_PFS),
        },
        oneOf=[{"required": ["url"]}, {"required": ["path"]}],
    )


def _platform() -> Schema:
    return _obj(
        "how pods reach the platform",
        {
            "api": _str("the platform API URL as pods reach it (PADDLECLOUD_API)", pattern="^https?://"),
            "tokenSecret": _str(
                "Secret (key 'token') holding the job token (PADDLECLOUD_JOB_TOKEN) and (key "
                "'rendezvous') the elastic torch rendezvous key (PADDLECLOUD_RDZV_KEY)"
            ),
            "image": _str("image of the fetch and wait init containers (the PaddleCloud image)"),
        },
    )


def _storage() -> Schema:
    return _obj(
        "the file service's volume: the user's PFS home is mounted at its /pfs path",
        {
            "claimName": _str("PersistentVolumeClaim in the job's namespace"),
            "filesPath": _str("directory in the claim holding /pfs/<datacenter>/", default="pfs/files"),
            "datacenter": _str("PFS datacenter name", default="local"),
        },
        required=("claimName",),
    )


def _scheduling() -> Schema:
    return _obj(
        "scheduling hints",
        {
            "queue": _str("Kueue LocalQueue (label kueue.x-k8s.io/queue-name) or Volcano queue"),
            "priorityClassName": _str("PriorityClass of every pod"),
            "schedulerName": _str("scheduler of every pod; 'volcano' adds a PodGroup"),
            "minAvailable": _int("PodGroup minMember (default: pservers + trainer.min)", minimum=1),
        },
    )


def _network() -> Schema:
    port = _obj(
        "a destination port",
        {
            "port": _int("port number", minimum=1, maximum=65535),
            "protocol": _str("protocol", enum=["TCP", "UDP", "SCTP"], default="TCP"),
        },
        required=("port",),
    )
    rule = _obj(
        "an IP block the pods may reach (a NetworkPolicy ipBlock)",
        {
            "cidr": _str("e.g. 10.0.0.9/32, 0.0.0.0/0", minLength=3),
            "except": {"type": "array", "items": {"type": "string"}, "maxItems": 32},
            "ports": {"type": "array", "items": port, "maxItems": 16, "description": "none: every port"},
        },
        required=("cidr",),
    )
    return _obj(
        "the job's NetworkPolicy: its pods accept connections only from its own pods and reach only "
        "them, the platform API (platform.api), the package URL, DNS and these destinations",
        {"egress": {"type": "array", "items": rule, "maxItems": 64, "description": "more destinations"}},
    )


def _batch() -> Schema:
    def bound(desc: str) -> Schema:
        return _int(desc, minimum=1, maximum=MAX_BATCH)

    return _obj(
        "global batch size; with min and max the platform's scheduler may change it (adaptive batch size)",
        {
            "size": bound("global batch the job starts with (PADDLECLOUD_BATCH_SIZE, _INIT)"),
            "min": bound("adaptive: smallest global batch (PADDLECLOUD_BATCH_MIN)"),
            "max": bound("adaptive: largest global batch (PADDLECLOUD_BATCH_MAX)"),
            "lrRule": _str(
                "adaptive: how the runtime scales the learning rate (PADDLECLOUD_LR_RULE)",
                enum=[str(r) for r in LrRule],
                default=str(LrRule.ADASCALE),
            ),
        },
        required=("size",),
        rules=[
            ("has(self.min) == has(self.max)", "batch.min and batch.max go together (adaptive batch size)"),
            ("!has(self.min) || (self.min <= self.size && self.size <= self.max)", "need min <= size <= max"),
        ],
    )


def spec_schema() -> Schema:
    """The openAPIV3Schema of ``.spec``."""
    return _obj(
        "what to run",
        {
            "user": _str("owner (PADDLECLOUD_JOB_USER); whose PFS home the pods mount", minLength=1),
            "jobName": _str("job name in the platform (default metadata.name)"),
            "image": _str("container image of the workers (needs python3)", minLength=1),
            "imagePullSecret": _str(
                "Secret (kubernetes.io/dockerconfigjson) the pods pull the image with: the job owner's "
                "registry login, made by the platform"
            ),
            "entry": _str("shell command run in the package directory", minLength=1, maxLength=4096),
            "framework": _str("env contract flavour", enum=list(FRAMEWORKS), default="none"),
            "package": _package(),
            "platform": _platform(),
            "storage": _storage(),
            "input": _str("PFS path read by the job", pattern=_PFS),
            "output": _str("PFS path written by the job", pattern=_PFS),
            "env": {
                "type": "object",
                "description": "environment variables, applied last",
                "additionalProperties": {"type": "string"},
            },
            "pserver": _pserver(),
            "trainer": _trainer(),
            "restartPolicy": _restart_policy("restart policy of trainers (default Never)"),
            "retryExitCodes": {
                "type": "array",
                "description": "exit codes the ExitCode policy retries",
                "items": {"type": "integer", "minimum": 1, "maximum": 255},
                "maxItems": 64,
            },
            "backoffLimit": _int("restarts allowed over the whole job", minimum=0, maximum=1000, default=3),
            "restartBackoffSeconds": {
                "type": "number",
                "description": "delay before a worker's first restart (doubles per restart)",
                "minimum": 0,
                "maximum": 600,
                "default": 1,
            },
            "restartBackoffMaxSeconds": {
                "type": "number",
                "description": "cap of the restart delay",
                "minimum": 0,
                "maximum": 3600,
                "default": 30,
            },
            "activeDeadlineSeconds": _int("fail the job this long after it started", minimum=1),
            "cleanPodPolicy": _str(
                "pods deleted when the job ends: None (stop running pods, keep all), Running, All",
                enum=list(CLEAN_POD_POLICIES),
                default="None",
            ),
            "ttlSecondsAfterFinished": _int("delete the TrainingJob this long after it ended", minimum=0),
            "terminationGracePeriodSeconds": _int(
                "SIGTERM to SIGKILL for pods", minimum=0, maximum=3600, default=30
            ),
            "scheduling": _scheduling(),
            "network": _network(),
            "batch": _batch(),
            "sampleset": _obj(
                "a SampleSet of this namespace: its claim is mounted read-only at /mnt/sampleset in every "
                "pod (PADDLECLOUD_SAMPLESET_DIR), and nodes holding its cache are preferred",
                {"name": _str("the SampleSet's name", minLength=1)},
                required=("name",),
            ),
        },
        required=("user", "image", "entry", "package"),
        rules=[
            (
                "self.framework != 'paddle-ps' || (has(self.pserver) && self.pserver.replicas >= 1)",
                "framework paddle-ps needs at least 1 pserver (pserver.replicas >= 1)",
            ),
            (
                "!(self.framework in ['paddle-collective', 'torch']) || !has(self.pserver) "
                "|| self.pserver.replicas == 0",
                "collective and torch jobs run no pservers",
            ),
        ],
    )


def _role_counts(role: str) -> Schema:
    return _obj(
        f"{role} pods",
        {
            "desired": _int("wanted"),
            "active": _int("pods not finished (pending or running)"),
            "ready": _int("running and ready"),
            "succeeded": _int("exited 0"),
            "failed": _int("failed (current runs)"),
        },
    )


def _condition() -> Schema:
    return _obj(
        "a phase the job reached; the current one has status True",
        {
            "type": _str("phase", enum=list(PHASES)),
            "status": _str("True, False or Unknown", enum=["True", "False", "Unknown"]),
            "reason": _str("machine-readable why"),
            "message": _str("human-readable why"),
            "lastTransitionTime": _str("when", format="date-time"),
        },
        required=("type", "status"),
    )


def status_schema() -> Schema:
    """The openAPIV3Schema of ``.status`` (written by the operator through the status subresource)."""
    failure = _obj(
        "the last worker failure",
        {
            "worker": _str("e.g. trainer-1"),
            "run": _int("its run"),
            "exitCode": _int("exit code, when known"),
            "reason": _str("the container's termination reason"),
            "message": _str("the tail of its log (termination message)"),
            "time": _str("when", format="date-time"),
        },
    )
    return _obj(
        "what the operator observed",
        {
            "phase": _str("job phase", enum=list(PHASES)),
            "reason": _str("why, machine-readable"),
            "message": _str("why, for people"),
            "pservers": _role_counts("pserver"),
            "trainers": _role_counts("trainer"),
            "restartCount": _int("restarts made over the whole job"),
            "workerRuns": {
                "type": "object",
                "description": "each worker's current run (PADDLECLOUD_RESTART); absent: 0",
                "additionalProperties": {"type": "integer"},
            },
            "lastFailure": failure,
            "conditions": {
                "type": "array",
                "items": _condition(),
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["type"],
            },
            "startTime": _str("when the first pod was created", format="date-time"),
            "completionTime": _str("when the job ended", format="date-time"),
            "observedGeneration": {"type": "integer", "format": "int64"},
            "selector": _str("label selector of the trainer pods (scale subresource)"),
        },
    )


def _columns() -> list[Schema]:
    def col(name: str, type_: str, path: str, **kw: Any) -> Schema:
        return {"name": name, "type": type_, "jsonPath": path, **kw}

    return [
        col("Phase", "string", ".status.phase"),
        col("Pservers", "integer", ".spec.pserver.replicas"),
        col("Trainers", "integer", ".status.trainers.active"),
        col("Desired", "integer", ".spec.trainer.replicas"),
        col("Restarts", "integer", ".status.restartCount"),
        col("Reason", "string", ".status.reason"),
        col("Message", "string", ".status.message", priority=1),
        col("Age", "date", ".metadata.creationTimestamp"),
    ]


def manifest() -> dict[str, Any]:
    """The CustomResourceDefinition (``apiextensions.k8s.io/v1``)."""
    name_rule = (
        f"self.metadata.name.size() <= {MAX_JOB_NAME} && self.metadata.name.matches('{_DNS1035}')",
        f"name must be a DNS-1035 label of at most {MAX_JOB_NAME} characters",
    )
    schema = _obj(
        "A distributed training job: parameter servers and trainers (or a collective job)",
        {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": status_schema(),
        },
        required=("spec",),
        rules=[name_rule],
    )
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": NAME, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": [SHORT_NAME],
                "categories": ["paddlecloud"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.trainer.replicas",
                            "statusReplicasPath": ".status.trainers.active",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": _columns(),
                }
            ],
        },
    }


def generated_header(module: str) -> str:
    """The first lines of a generated manifest file: which module makes it."""
    return (
        f"# Generated by `python -m paddlecloud.backends.kubernetes.{module}` from\n"
        f"# src/paddlecloud/backends/kubernetes/{module}.py: edit that, then regenerate.\n"
    )


def render_yaml() -> str:
    """``deploy/kubernetes/base/crd.yaml``: the manifest with a header saying where it comes from."""
    return generated_header("crd") + yaml.safe_dump(manifest(), sort_keys=False, width=100)


def write_yaml(text: str, default: str, argv: list[str] | None = None) -> int:
    """Write ``text`` to the path in ``argv`` (default: ``default``); the CRD modules' ``main``."""
    args = sys.argv[1:] if argv is None else argv
    target = Path(args[0] if args else default)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    print(f"wrote {target}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Write the CRD YAML to the given path (default: ``deploy/kubernetes/base/crd.yaml``)."""
    return write_yaml(render_yaml(), "deploy/kubernetes/base/crd.yaml", argv)


if __name__ == "__main__":
    raise SystemExit(main())
