"""Settings of the API server's Kubernetes backend (``paddlecloud up --backend kubernetes``).

Plain values only (no ``kubernetes`` import), so the platform's configuration can hold them on a
machine without the optional ``kubernetes`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

__all__ = ["KubeSettings", "sampleset_name", "user_namespace"]


@dataclass(frozen=True)
class KubeSettings:
    #: kubeconfig file; None: the pod's service account (in-cluster)
    kubeconfig: str | None = None
    #: one namespace for every job; None: each user's own ``paddlecloud-<user>`` (created on demand)
    namespace: str | None = None
    #: the jobs' image (needs python3, and pip when a package has a requirements.txt)
    image: str = "python:3.11-slim"
    #: the fetch / wait init containers' image ("": the CRD's default, ``paddlecloud:<version>``)
    platform_image: str = ""
    #: the file service's PersistentVolumeClaim, mounted in the pods at the /pfs paths ("": none)
    storage_claim: str = ""
    #: the claim's directory that holds /pfs/<datacenter>/
    files_path: str = "pfs/files"
    #: pods' SIGTERM → SIGKILL grace (scale-down, restarts, kill)
    grace_s: int = 10
    #: every API call's time limit
    request_timeout_s: float = 10.0
    #: ``logs -f`` of a pod that has not started: how long to wait for it
    follow_wait_s: float = 600.0
    #: how long ``nodes()`` reuses the last node list
    nodes_ttl_s: float = 5.0
    #: SampleSets: the JuiceFS CSI driver's Secret of the platform's JuiceFS file system (metaurl,
    #: storage, bucket, ...), and its namespace (``docs/kubernetes.md``)
    juicefs_secret: str = "paddlecloud-juicefs"
    juicefs_secret_namespace: str = "paddlecloud"
    #: the image of SampleJobs' Jobs (juicefs, sh, GNU find)
    juicefs_image: str = "juicedata/mount:ce-v1.2.3"

    #: the ``up`` options these settings are made from (``backends.registry``)
    OPTIONS: ClassVar[tuple[str, ...]] = (
        "kubeconfig", "image", "kube_image", "kube_namespace", "kube_storage_claim",
    )  # fmt: skip

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> KubeSettings:
        kubeconfig = options.get("kubeconfig")
        return cls(
            kubeconfig=str(Path(kubeconfig).resolve()) if kubeconfig else None,
            namespace=options.get("kube_namespace") or None,
            image=options.get("image") or cls.image,
            platform_image=options.get("kube_image") or "",
            storage_claim=options.get("kube_storage_claim") or "",
        )


def user_namespace(settings: KubeSettings, user: str) -> str:
    return settings.namespace or f"paddlecloud-{user}"


def sampleset_name(settings: KubeSettings, owner: str, name: str) -> str:
    """A SampleSet's name in Kubernetes: its own in a per-user namespace, ``<owner>-<name>`` in a
    shared one (as TrainingJobs)."""
    return f"{owner}-{name}" if settings.namespace else name
