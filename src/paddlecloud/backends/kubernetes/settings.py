"""Settings of the API server's Kubernetes backend (``paddlecloud up --backend kubernetes``).

Plain values only (no ``kubernetes`` import), so the platform's configuration can hold them on a
machine without the optional ``kubernetes`` extra.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KubeSettings", "user_namespace"]


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


def user_namespace(settings: KubeSettings, user: str) -> str:
    return settings.namespace or f"paddlecloud-{user}"
