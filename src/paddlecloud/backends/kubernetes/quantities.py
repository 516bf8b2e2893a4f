"""Kubernetes resource amounts as the scheduler's :class:`Resources` (cpu millicores, bytes, GPUs).

    Node dict ──node_info()──▶ NodeInfo (allocatable of a ready, schedulable node) or None
    Pod dict  ──pod_request()─▶ Resources the pod holds on its node (what the kube-scheduler counts:
                               the larger of its containers' sum and its largest init container)
    requests / limits dict ──amounts()──▶ Resources (GPUs: ``nvidia.com/gpu``, limits or requests)

Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from paddlecloud.backends.base import NodeInfo
from paddlecloud.core.quantity import QuantityError, parse_cpu, parse_memory
from paddlecloud.core.resources import Resources

__all__ = ["GPU", "amounts", "node_info", "pod_request"]

GPU = "nvidia.com/gpu"


def _map(d: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = d.get(key)
    return value if isinstance(value, Mapping) else {}


def amounts(requests: Mapping[str, Any], limits: Mapping[str, Any] | None = None) -> Resources:
    """cpu and memory from ``requests`` (else ``limits``, as Kubernetes defaults them), GPUs from
    either; an unreadable quantity counts as 0."""
    limits = limits or {}

    def get(key: str, parse: Any) -> int:
        raw = requests.get(key, limits.get(key))
        if raw is None:
            return 0
        try:
            return int(parse(str(raw)))
        except (QuantityError, ValueError):
            return 0

    return Resources(get("cpu", parse_cpu), get("memory", parse_memory), get(GPU, int))


def _container(c: Mapping[str, Any]) -> Resources:
    res = _map(c, "resources")
    return amounts(_map(res, "requests"), _map(res, "limits"))


def pod_request(pod: Mapping[str, Any]) -> Resources:
    spec = _map(pod, "spec")
    total = Resources()
    for c in spec.get("containers") or ():
        total = total + _container(c)
    for c in spec.get("initContainers") or ():
        r = _container(c)
        total = Resources(max(total.cpu_m, r.cpu_m), max(total.memory, r.memory), max(total.gpu, r.gpu))
    return total


def node_info(node: Mapping[str, Any]) -> NodeInfo | None:
    """A schedulable, ready Node's allocatable resources; None for any other node."""
    spec, status = _map(node, "spec"), _map(node, "status")
    conditions = status.get("conditions") or ()
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    if spec.get("unschedulable") or not ready:
        return None
    capacity = amounts(_map(status, "allocatable"))
    return NodeInfo(
        name=str(_map(node, "metadata").get("name")), capacity=capacity, gpus=tuple(range(capacity.gpu))
    )
