"""The ``SampleSet`` and ``SampleJob`` custom resources: names, labels and the CRD manifests.

    manifests() ──▶ [SampleSet CRD, SampleJob CRD] (apiextensions.k8s.io/v1, group of TrainingJob)
        └─▶ render_yaml() ──▶ deploy/kubernetes/base/sampleset-crd.yaml  (``python -m ...sampleset_crd``
                                                                         writes it; a test fails while stale)

A SampleSet is a data set cached near the trainers with JuiceFS (paddle-operator's SampleSet): the
operator gives it a PersistentVolume of the JuiceFS CSI driver (``csi.juicefs.com``, the SampleSet's
own sub-directory of the platform's JuiceFS file system) and a claim :func:`claim_name` in its
namespace. A SampleJob is one piece of work on it (sync from PFS, warmup, clear, rmr), run by the
operator as Kubernetes Jobs. Nodes whose cache holds the data carry the label :func:`cache_label`;
TrainingJobs that name the SampleSet prefer them. Pure: no Kubernetes client. Field meanings:
``docs/kubernetes.md``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import yaml

from paddlecloud.backends.kubernetes import crd
from paddlecloud.backends.kubernetes.crd import Schema, _int, _obj, _quantity, _str

__all__ = [
    "DEFAULT_IMAGE",
    "JOB_KIND",
    "JOB_KINDS",
    "JOB_PHASES",
    "JOB_PLURAL",
    "LABEL_SAMPLEJOB",
    "LABEL_SAMPLESET",
    "MOUNT_PATH",
    "SET_KIND",
    "SET_PHASES",
    "SET_PLURAL",
    "cache_label",
    "claim_name",
    "manifests",
    "render_yaml",
]

SET_KIND, SET_PLURAL, SET_SINGULAR = "SampleSet", "samplesets", "sampleset"
JOB_KIND, JOB_PLURAL, JOB_SINGULAR = "SampleJob", "samplejobs", "samplejob"
JOB_KINDS = ("sync", "warmup", "clear", "rmr")
SET_PHASES = ("Pending", "Ready", "Deleting", "Failed")
JOB_PHASES = ("Pending", "Running", "Succeeded", "Failed")
LABEL_SAMPLESET = f"{crd.GROUP}/sampleset"
LABEL_SAMPLEJOB = f"{crd.GROUP}/samplejob"
#: where a TrainingJob's pods and a SampleJob's Jobs see the SampleSet
MOUNT_PATH = "/mnt/sampleset"
#: the JuiceFS image of the SampleJobs' Jobs (needs ``juicefs``, ``sh``, GNU ``find``)
DEFAULT_IMAGE = "juicedata/mount:ce-v1.2.3"
_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
#: a path inside the volume: relative (RE2, as the API server checks it; ".." is a CEL rule)
_REL_PATH = r"^([^/][^\x00]*)?$"
_NO_DOTDOT = ("!self.path.matches('(^|/)\\\\.\\\\.(/|$)')", "path must not contain '..'")


def claim_name(sampleset: str) -> str:
    """The PersistentVolumeClaim of SampleSet ``sampleset`` in its namespace."""
    return f"sampleset-{sampleset}"


def cache_label(namespace: str, sampleset: str) -> str:
    """The label (value ``"true"``) of the nodes whose cache holds SampleSet ``namespace/sampleset``:
    a hash keeps it a valid label name whatever the names' lengths."""
    digest = hashlib.sha256(f"{namespace}/{sampleset}".encode()).hexdigest()[:20]
    return f"cache.{crd.GROUP}/ss-{digest}"


# -- schemas ----------------------------------------------------------------------------------


def _set_spec() -> Schema:
    return _obj(
        "the data set and where it is cached",
        {
            "source": _obj(
                "the PFS folder the data is synced from: a directory of a claim in this namespace",
                {
                    "claimName": _str(
                        "PersistentVolumeClaim holding PFS (the platform's data claim)", minLength=1
                    ),
                    "path": _str("the folder's path inside the claim (relative)", pattern=_REL_PATH),
                },
                required=("claimName", "path"),
                rules=[_NO_DOTDOT],
            ),
            "cacheSize": {**_quantity(), "description": "cache cap per node (e.g. 10Gi)"},
            "nodes": {
                "type": "array",
                "description": "nodes that cache the data (empty: every node)",
                "items": {"type": "string", "minLength": 1},
                "maxItems": 1000,
            },
            "volume": _obj(
                "the platform's JuiceFS file system: the CSI driver's Secret (metaurl, storage, bucket, ...)",
                {
                    "secretName": _str("Secret of the JuiceFS CSI driver", minLength=1),
                    "secretNamespace": _str("its namespace", minLength=1),
                },
                required=("secretName", "secretNamespace"),
            ),
            "image": _str("image of the SampleJobs' Jobs (juicefs, sh, find)", default=DEFAULT_IMAGE),
        },
        required=("source", "cacheSize", "volume"),
    )


def _node_cache() -> Schema:
    return _obj(
        "one node's cache",
        {
            "node": _str("node name"),
            "mounted": {"type": "boolean", "description": "the volume is available to pods there"},
            "cachedBytes": {"type": "integer", "format": "int64", "description": "bytes cached there"},
            "message": _str("what went wrong there"),
        },
        required=("node",),
    )


def _set_status() -> Schema:
    return _obj(
        "what the operator observed",
        {
            "phase": _str("Pending (claim not bound yet), Ready, Deleting or Failed", enum=list(SET_PHASES)),
            "message": _str("why, for people"),
            "claimName": _str("the claim pods mount (read-only for TrainingJobs)"),
            "cacheLabel": _str("label of the nodes whose cache holds the data"),
            "files": {"type": "integer", "format": "int64", "description": "files in the volume (last sync)"},
            "bytes": {"type": "integer", "format": "int64", "description": "bytes in the volume (last sync)"},
            "nodes": {"type": "array", "items": _node_cache()},
            "observedGeneration": {"type": "integer", "format": "int64"},
        },
    )


def _job_spec() -> Schema:
    return _obj(
        "one piece of work on a SampleSet",
        {
            "sampleSet": _str("the SampleSet (same namespace)", minLength=1, pattern=_NAME),
            "kind": _str(
                "sync (from the source), warmup (fill caches), clear (empty caches), rmr (remove path)",
                enum=list(JOB_KINDS),
            ),
            "path": _str("relative to the volume root; empty: all of it", pattern=_REL_PATH, default=""),
        },
        required=("sampleSet", "kind"),
        rules=[
            ("self.kind != 'rmr' || self.path != ''", "rmr needs a path (the volume root cannot be removed)"),
            _NO_DOTDOT,
        ],
    )


def _job_status() -> Schema:
    return _obj(
        "what the operator observed",
        {
            "phase": _str("phase", enum=list(JOB_PHASES)),
            "message": _str("why, for people"),
            "done": _int("Jobs finished well (one per node for warmup and clear, else one)"),
            "total": _int("Jobs in all"),
            "nodes": {
                "type": "array",
                "description": "nodes where the work succeeded",
                "items": {"type": "string"},
            },
            "files": {
                "type": "integer",
                "format": "int64",
                "description": "sync / rmr: files in the volume after",
            },
            "bytes": {
                "type": "integer",
                "format": "int64",
                "description": "sync / rmr: bytes in the volume after",
            },
            "startTime": _str("when its first Job was created", format="date-time"),
            "completionTime": _str("when it ended", format="date-time"),
        },
    )


def _crd(
    kind: str, plural: str, singular: str, short: str, spec: Schema, status: Schema, cols: list[Schema]
) -> dict[str, Any]:
    schema = _obj(
        f"PaddleCloud {kind}",
        {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        required=("spec",),
        rules=[("self.metadata.name.size() <= 52", "name must be at most 52 characters")],
    )
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{crd.GROUP}", "labels": {crd.LABEL_MANAGED_BY: crd.MANAGED_BY}},
        "spec": {
            "group": crd.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "plural": plural,
                "singular": singular,
                "shortNames": [short],
                "categories": ["paddlecloud"],
            },
            "versions": [
                {
                    "name": crd.VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": cols,
                }
            ],
        },
    }


def _col(name: str, type_: str, path: str) -> Schema:
    return {"name": name, "type": type_, "jsonPath": path}


def manifests() -> list[dict[str, Any]]:
    """The SampleSet and SampleJob CustomResourceDefinitions."""
    set_cols = [
        _col("Phase", "string", ".status.phase"),
        _col("Files", "integer", ".status.files"),
        _col("Bytes", "integer", ".status.bytes"),
        _col("Age", "date", ".metadata.creationTimestamp"),
    ]
    job_cols = [
        _col("SampleSet", "string", ".spec.sampleSet"),
        _col("Kind", "string", ".spec.kind"),
        _col("Phase", "string", ".status.phase"),
        _col("Done", "integer", ".status.done"),
        _col("Total", "integer", ".status.total"),
        _col("Age", "date", ".metadata.creationTimestamp"),
    ]
    return [
        _crd(SET_KIND, SET_PLURAL, SET_SINGULAR, "ss", _set_spec(), _set_status(), set_cols),
        _crd(JOB_KIND, JOB_PLURAL, JOB_SINGULAR, "sj", _job_spec(), _job_status(), job_cols),
    ]


def render_yaml() -> str:
    """``deploy/kubernetes/base/sampleset-crd.yaml``: both manifests, with where they come from."""
    return crd.generated_header("sampleset_crd") + yaml.safe_dump_all(manifests(), sort_keys=False, width=100)


def main(argv: list[str] | None = None) -> int:
    """Write the CRD YAML to the given path (default: ``deploy/kubernetes/base/sampleset-crd.yaml``)."""
    return crd.write_yaml(render_yaml(), "deploy/kubernetes/base/sampleset-crd.yaml", argv)


if __name__ == "__main__":
    raise SystemExit(main())
