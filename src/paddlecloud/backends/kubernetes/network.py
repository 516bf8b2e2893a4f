"""The NetworkPolicy of one TrainingJob: its pods talk to each other, the platform and DNS, nothing else.

    JobView ──network_policy()──▶ NetworkPolicy "<job>" (networking.k8s.io/v1), owned by the TrainingJob
        podSelector  paddlecloud.org/job=<job>: every pod of the job (pservers, trainers, rendezvous)
        ingress      from those pods only (any port); nothing else may connect to them
        egress       to those pods; to DNS (kube-system's k8s-app=kube-dns, UDP and TCP 53); to the
                     platform API (spec.platform.api) and the package URL (spec.package.url), each
                     as url_rule() makes it; to each IP block of spec.network.egress

How a URL becomes an egress rule (:func:`url_rule`), on its port (default 80 / 443 by scheme):

    http://10.1.2.3:8080                  an IP: ipBlock 10.1.2.3/32 (a server outside the cluster)
    http://paddlecloud-api.paddlecloud.svc:8080     a Service <svc>.<ns>.svc[.<domain>]: the pods
                                          labelled app.kubernetes.io/name=<svc> in namespace <ns>
    http://paddlecloud-api:8080           a Service of the job's own namespace: the same, there
    https://files.example.org/p.tar.gz    any other name: any address on that port (a NetworkPolicy
                                          cannot name a DNS host)

Policies are enforced on pod addresses after a Service's address was translated, so an in-cluster
server is matched by its pods (the deploy's API server: ``app.kubernetes.io/name: paddlecloud-api``,
Service port = container port 8080), never by its Service's cluster IP. The reconcile creates the
policy before any pod of the job (``objects.py``); the cluster's network plugin must enforce
NetworkPolicies (Calico, Cilium, ...) for it to mean anything. Pure: dicts out, no client.
"""

from __future__ import annotations

import ipaddress
from typing import Any
from urllib.parse import urlsplit

from paddlecloud.backends.kubernetes import crd
from paddlecloud.backends.kubernetes.pods import labels, owner_reference
from paddlecloud.backends.kubernetes.spec import JobView

__all__ = [
    "API_POD_LABEL",
    "DNS_NAMESPACE",
    "DNS_POD_LABELS",
    "NAMESPACE_LABEL",
    "network_policy",
    "policy_name",
    "url_rule",
]

Obj = dict[str, Any]

#: the label every namespace carries with its own name (Kubernetes >= 1.21)
NAMESPACE_LABEL = "kubernetes.io/metadata.name"
#: the cluster DNS (CoreDNS keeps kube-dns's label in kubeadm, kind, GKE, EKS, AKS)
DNS_NAMESPACE = "kube-system"
DNS_POD_LABELS = {"k8s-app": "kube-dns"}
#: the label an in-cluster Service's pods carry with the Service's name (the deploy's API server)
API_POD_LABEL = "app.kubernetes.io/name"
_DEFAULT_PORTS = {"http": 80, "https": 443}


def policy_name(job: JobView) -> str:
    return job.name


#: the public internet, for a host named outside the cluster: every address but the private,
#: link-local (metadata: 169.254.169.254), loopback and shared ranges, IPv4 and IPv6
PUBLIC: tuple[Obj, ...] = (
    {"cidr": "0.0.0.0/0", "except": ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10",
                                     "169.254.0.0/16", "127.0.0.0/8"]},
    {"cidr": "::/0", "except": ["fc00::/7", "fe80::/10", "::1/128"]},
)  # fmt: skip


def _tcp(port: int) -> list[Obj]:
    return [{"protocol": "TCP", "port": port}]


def url_rule(url: str) -> Obj | None:
    """The egress rule that lets a job's pods reach ``url``; None when ``url`` names no host (or a
    port that is not one)."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or _DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return None
    if not host or port is None:
        return None
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None:
        return {"to": [{"ipBlock": {"cidr": f"{ip}/{ip.max_prefixlen}"}}], "ports": _tcp(port)}
    names = host.rstrip(".").split(".")
    if len(names) == 1:  # a Service of the job's own namespace
        return {"to": [{"podSelector": {"matchLabels": {API_POD_LABEL: names[0]}}}], "ports": _tcp(port)}
    if len(names) >= 3 and names[2] == "svc":  # <svc>.<ns>.svc[.cluster.local]
        peer = {
            "namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: names[1]}},
            "podSelector": {"matchLabels": {API_POD_LABEL: names[0]}},
        }
        return {"to": [peer], "ports": _tcp(port)}
    # a host outside the cluster by name (a NetworkPolicy cannot name one): its port at public
    # addresses only, never the pods', the services', the nodes' or a cloud's metadata address
    # (give an IP, or --kube-egress, for a server on a private one)
    return {"to": [{"ipBlock": dict(block)} for block in PUBLIC], "ports": _tcp(port)}


def _dns() -> Obj:
    peer = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_LABEL: DNS_NAMESPACE}},
        "podSelector": {"matchLabels": dict(DNS_POD_LABELS)},
    }
    return {"to": [peer], "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}


def _block(rule: Obj) -> Obj:
    block: Obj = {"cidr": rule["cidr"]}
    if rule.get("except"):
        block["except"] = list(rule["except"])
    out: Obj = {"to": [{"ipBlock": block}]}
    if rule.get("ports"):
        out["ports"] = [{"protocol": p["protocol"], "port": p["port"]} for p in rule["ports"]]
    return out


def _egress(job: JobView, own: Obj) -> list[Obj]:
    out: list[Obj] = [{"to": [own]}, _dns()]
    for url in (job.api, job.package_url):
        rule = url_rule(url) if url else None
        if rule is not None and rule not in out:
            out.append(rule)
    out += [_block(rule) for rule in job.egress]
    return out


def network_policy(job: JobView) -> Obj:
    """The job's NetworkPolicy (see the module's docstring)."""
    own = {"podSelector": {"matchLabels": {crd.LABEL_JOB: job.name}}}
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": policy_name(job),
            "namespace": job.namespace,
            "labels": labels(job),
            "ownerReferences": [owner_reference(job)],
        },
        "spec": {
            "podSelector": {"matchLabels": {crd.LABEL_JOB: job.name}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [own]}],
            "egress": _egress(job, own),
        },
    }
