"""A small model of Kubernetes NetworkPolicy semantics, to ask "may this connection happen?" of the
policies the operator makes (no cluster, no network plugin can run here).

    allowed(policies, src, dst, port, protocol) ── egress of src's policies, then ingress of dst's

The rules it follows are the API's (networking.k8s.io/v1): a pod no policy selects for a direction is
open in that direction; a selected pod allows only what some rule of some selecting policy allows
(rules add up); a peer with only ``podSelector`` means pods of the policy's own namespace, with
``namespaceSelector`` pods of the matching namespaces; ``ipBlock`` is for addresses outside the
cluster; a rule without ``ports`` allows every port, without ``to`` / ``from`` every peer. Only
``matchLabels`` selectors are understood: anything else fails the test loudly.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Endpoint:
    """A pod (``namespace`` set) or an address outside the cluster (``namespace`` None)."""

    ip: str
    namespace: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)


def pod(namespace: str, ip: str, **labels: str) -> Endpoint:
    return Endpoint(ip, namespace, dict(labels))


def outside(ip: str) -> Endpoint:
    return Endpoint(ip)


def _selects(selector: Obj, labels: Mapping[str, str]) -> bool:
    unknown = set(selector) - {"matchLabels"}
    assert not unknown, f"the model understands matchLabels only, not {unknown}"
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())


def _peer(peer: Obj, policy_ns: str, ep: Endpoint) -> bool:
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        if ep.namespace is not None:
            return False  # pods are matched by selectors (ipBlock is for cluster-external addresses)
        ip = ipaddress.ip_address(ep.ip)
        inside = ip in ipaddress.ip_network(block["cidr"])
        return inside and not any(ip in ipaddress.ip_network(e) for e in block.get("except") or ())
    if ep.namespace is None:
        return False
    ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
    if ns_sel is None:
        ns_ok = ep.namespace == policy_ns
    else:
        ns_ok = _selects(ns_sel, {"kubernetes.io/metadata.name": ep.namespace})
    return ns_ok and (pod_sel is None or _selects(pod_sel, ep.labels))


def _ports(ports: Sequence[Obj] | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    return any(p.get("protocol", "TCP") == protocol and p.get("port") in (None, port) for p in ports)


def _side(
    policies: Sequence[Obj], me: Endpoint, other: Endpoint, port: int, protocol: str, kind: str
) -> bool:
    """May ``me`` send (kind Egress) to / accept (Ingress) from ``other``?"""
    if me.namespace is None:
        return True  # outside the cluster: no policy of ours applies
    mine = [
        p
        for p in policies
        if p["metadata"]["namespace"] == me.namespace
        and kind in p["spec"].get("policyTypes", ["Ingress"])
        and _selects(p["spec"]["podSelector"], me.labels)
    ]
    if not mine:
        return True
    key, peers_key = ("egress", "to") if kind == "Egress" else ("ingress", "from")
    for policy in mine:
        ns = policy["metadata"]["namespace"]
        for rule in policy["spec"].get(key) or ():
            peers = rule.get(peers_key)
            if (peers is None or any(_peer(peer, ns, other) for peer in peers)) and _ports(
                rule.get("ports"), port, protocol
            ):
                return True
    return False


def allowed(policies: Sequence[Obj], src: Endpoint, dst: Endpoint, port: int, protocol: str = "TCP") -> bool:
    """Would a connection from ``src`` to ``dst``'s ``port`` get through (both ends' policies)?"""
    return _side(policies, src, dst, port, protocol, "Egress") and _side(
        policies, dst, src, port, protocol, "Ingress"
    )
