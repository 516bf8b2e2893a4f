"""Settings of the API server's Kubernetes backend (``paddlecloud up --backend kubernetes``).

Plain values only (no ``kubernetes`` import), so the platform's configuration can hold them on a
machine without the optional ``kubernetes`` extra. ``--kube-egress CIDR[:PORT[/PROTOCOL]]`` values
are checked here (:func:`egress_rule`) and reach each TrainingJob as ``spec.network.egress``, the
destinations its NetworkPolicy lets pods reach besides their job, the API and DNS (``network.py``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from paddlecloud.backends.options import OptionError

__all__ = ["KubeSettings", "egress_rule", "sampleset_name", "user_namespace"]

_EGRESS = re.compile(r"(?P<net>[^/]+/\d{1,3})(?::(?P<port>\d{1,5})(?:/(?P<proto>TCP|UDP|SCTP))?)?")


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
    #: more destinations job pods may reach (``CIDR[:PORT[/PROTOCOL]]``, e.g. a pip index for the
    #: install step: ``10.0.0.9/32:443``); the NetworkPolicy allows only their job, the API and DNS
    egress: tuple[str, ...] = ()

    #: the ``up`` options these settings are made from (``backends.registry``)
    OPTIONS: ClassVar[tuple[str, ...]] = (
        "kubeconfig", "image", "kube_image", "kube_namespace", "kube_storage_claim", "kube_egress",
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
            egress=_egress(options.get("kube_egress") or ()),
        )


def _egress(values: Any) -> tuple[str, ...]:
    for value in values:
        try:
            egress_rule(str(value))
        except ValueError as exc:
            raise OptionError("--kube-egress", str(exc)) from None
    return tuple(str(v) for v in values)


def egress_rule(text: str) -> dict[str, Any]:
    """``CIDR[:PORT[/PROTOCOL]]`` as a ``spec.network.egress`` item of a TrainingJob: ``10.0.0.0/8``
    (every port), ``0.0.0.0/0:443``, ``169.254.20.10/32:53/UDP``; ``ValueError`` saying what is wrong."""
    m = _EGRESS.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"{text!r}: expected CIDR[:PORT[/PROTOCOL]], e.g. 10.0.0.0/8 or 0.0.0.0/0:443")
    try:
        net = ipaddress.ip_network(m["net"], strict=True)
    except ValueError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    out: dict[str, Any] = {"cidr": str(net)}
    if m["port"]:
        port = int(m["port"])
        if not 1 <= port <= 65535:
            raise ValueError(f"{text!r}: port {port} is not in 1..65535")
        out["ports"] = [{"port": port, "protocol": m["proto"] or "TCP"}]
    return out


def user_namespace(settings: KubeSettings, user: str) -> str:
    return settings.namespace or f"paddlecloud-{user}"


def sampleset_name(settings: KubeSettings, owner: str, name: str) -> str:
    """A SampleSet's name in Kubernetes: its own in a per-user namespace, ``<owner>-<name>`` in a
    shared one (as TrainingJobs)."""
    return f"{owner}-{name}" if settings.namespace else name
