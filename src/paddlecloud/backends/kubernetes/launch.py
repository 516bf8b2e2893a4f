"""What the API server writes to start a job on Kubernetes: a TrainingJob and its token Secret.

    JobLaunch + KubeSettings ──training_job()──▶ TrainingJob dict (docs/kubernetes.md field names):
                                                 resources with limits = requests, --kube-egress
                                                 as spec.network.egress
                              ──token_secret()──▶ Secret "<tj>-job-token" (keys "token" and
                                  "rendezvous": the job token and rendezvous key), owned by it

The TrainingJob's name is the job's name in a per-user namespace (``paddlecloud-<user>``), or
``<user>-<job>`` in a shared one; either must be a DNS-1035 label of at most 52 characters (pod and
Service names derive from it). The label ``paddlecloud.org/scheduler: platform`` says the API
server's scheduler sizes the job, so the EDL controller leaves it alone. Pure.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from paddlecloud.backends.base import JobLaunch
from paddlecloud.backends.errors import JobRejected
from paddlecloud.backends.kubernetes import crd
from paddlecloud.backends.kubernetes.settings import KubeSettings, egress_rule, sampleset_name, user_namespace
from paddlecloud.core.quantity import format_cpu, format_memory
from paddlecloud.core.resources import Resources

__all__ = [
    "ANNOTATION_ATTEMPT",
    "ANNOTATION_KEY",
    "LABEL_SCHEDULER",
    "PLATFORM",
    "Placed",
    "job_name",
    "placed",
    "pull_secret",
    "requirements",
    "token_secret",
    "training_job",
]

LABEL_SCHEDULER = f"{crd.GROUP}/scheduler"
PLATFORM = "platform"
ANNOTATION_KEY = f"{crd.GROUP}/key"  # the platform's "user/name"
ANNOTATION_ATTEMPT = f"{crd.GROUP}/attempt"  # which start of the job this TrainingJob is

Obj = dict[str, Any]
Placed = tuple[str, str]  # (namespace, TrainingJob name)


def job_name(settings: KubeSettings, user: str, name: str) -> str:
    """The TrainingJob's name; ``JobRejected`` when it cannot name pods and Services."""
    tj = f"{user}-{name}" if settings.namespace else name
    why = crd.check_job_name(tj)
    if why:
        raise JobRejected(f"cannot run on Kubernetes: {why}")
    return tj


def placed(settings: KubeSettings, launch: JobLaunch) -> Placed:
    return user_namespace(settings, launch.user), job_name(settings, launch.user, launch.name)


def requirements(r: Resources) -> Obj:
    """Resources of one worker as Kubernetes requests and limits, the same (QoS Guaranteed: the
    worker is limited to what the platform's scheduler counted for it, ``pods.guaranteed``)."""
    amounts = {"cpu": format_cpu(r.cpu_m), "memory": format_memory(r.memory)}
    if r.gpu:
        amounts["nvidia.com/gpu"] = str(r.gpu)
    return {"requests": amounts, "limits": dict(amounts)}


def _trainer(launch: JobLaunch) -> Obj:
    out: Obj = {"replicas": max(launch.count("trainer"), 1)}
    if launch.trainer_range is not None:
        out["min"], out["max"] = launch.trainer_range
    if "trainer" in launch.resources:
        out["resources"] = requirements(launch.resources["trainer"])
    return out


def _pserver(launch: JobLaunch) -> Obj:
    out: Obj = {"replicas": launch.count("pserver"), "restartPolicy": str(launch.restarts.pserver)}
    if "pserver" in launch.resources:
        out["resources"] = requirements(launch.resources["pserver"])
    return out


def _platform(launch: JobLaunch, settings: KubeSettings, name: str) -> Obj:
    out: Obj = {"tokenSecret": f"{name}-job-token"}
    if launch.api.url:
        out["api"] = launch.api.url
    if settings.platform_image:
        out["image"] = settings.platform_image
    return out


def _spec(launch: JobLaunch, settings: KubeSettings, name: str, datacenter: str) -> Obj:
    rules = launch.restarts
    spec: Obj = {
        "user": launch.user,
        "jobName": launch.name,
        "image": launch.image or settings.image,
        **({"imagePullSecret": f"{name}-pull"} if launch.image_auth is not None else {}),
        "entry": launch.entry,
        "framework": launch.framework,
        "package": {"path": launch.package_path},
        "platform": _platform(launch, settings, name),
        "env": dict(launch.env),
        "pserver": _pserver(launch),
        "trainer": _trainer(launch),
        "restartPolicy": str(rules.trainer),
        "retryExitCodes": sorted(rules.retry_exit_codes),
        "backoffLimit": rules.max_restarts,
        "restartBackoffSeconds": rules.backoff_s,
        "restartBackoffMaxSeconds": rules.backoff_max_s,
        "cleanPodPolicy": "None",  # finished pods and their logs stay until the job is removed
        "terminationGracePeriodSeconds": settings.grace_s,
    }
    for key, path in (("input", launch.files.input), ("output", launch.files.output)):
        if path:
            spec[key] = path
    if (b := launch.batch) is not None and b.adaptive is not None:
        spec["batch"] = {
            "size": b.size,
            "min": b.adaptive.min,
            "max": b.adaptive.max,
            "lrRule": str(b.lr_rule),
        }
    if launch.sampleset is not None:  # the operator mounts its claim read-only in every pod
        spec["sampleset"] = {"name": sampleset_name(settings, launch.sampleset.owner, launch.sampleset.name)}
    if settings.egress:  # more destinations the job's NetworkPolicy lets its pods reach (network.py)
        spec["network"] = {"egress": [egress_rule(e) for e in settings.egress]}
    if settings.storage_claim:
        spec["storage"] = {
            "claimName": settings.storage_claim,
            "filesPath": settings.files_path,
            "datacenter": datacenter,
        }
    return spec


def training_job(launch: JobLaunch, settings: KubeSettings, datacenter: str) -> Obj:
    """The TrainingJob that runs ``launch`` (its namespace and name: :func:`placed`)."""
    ns, name = placed(settings, launch)
    return {
        "apiVersion": crd.API_VERSION,
        "kind": crd.KIND,
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {
                crd.LABEL_MANAGED_BY: crd.MANAGED_BY,
                crd.LABEL_USER: launch.user,
                LABEL_SCHEDULER: PLATFORM,
            },
            "annotations": {ANNOTATION_KEY: launch.key, ANNOTATION_ATTEMPT: str(launch.attempt)},
        },
        "spec": _spec(launch, settings, name, datacenter),
    }


def pull_secret(launch: JobLaunch, job: Obj) -> Obj | None:
    """The Secret the pods pull the job's image with (the owner's registry login, as a
    ``kubernetes.io/dockerconfigjson``), owned by the TrainingJob (deleted with it); None: the job
    has no login for its image's registry."""
    auth, name = launch.image_auth, job["spec"].get("imagePullSecret")
    if auth is None or not name:
        return None
    meta = job["metadata"]
    pair = base64.b64encode(f"{auth.username}:{auth.password}".encode()).decode()
    config = {"auths": {auth.registry: {"username": auth.username, "password": auth.password, "auth": pair}}}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {crd.LABEL_MANAGED_BY: crd.MANAGED_BY, crd.LABEL_JOB: meta["name"]},
            "ownerReferences": [
                {"apiVersion": crd.API_VERSION, "kind": crd.KIND, "name": meta["name"], "uid": meta["uid"]}
            ],
        },
        "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": base64.b64encode(json.dumps(config).encode()).decode()},
    }


def token_secret(launch: JobLaunch, job: Obj, rendezvous_key: str) -> Obj:
    """The Secret holding the job token and the job's ``rendezvous_key`` (``PADDLECLOUD_RDZV_KEY``:
    written once with the TrainingJob, so every pod of it gets the same key, after a server restart
    too), owned by the TrainingJob (deleted with it)."""
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": job["spec"]["platform"]["tokenSecret"],
            "namespace": meta["namespace"],
            "labels": {crd.LABEL_MANAGED_BY: crd.MANAGED_BY, crd.LABEL_JOB: meta["name"]},
            "ownerReferences": [
                {"apiVersion": crd.API_VERSION, "kind": crd.KIND, "name": meta["name"], "uid": meta["uid"]}
            ],
        },
        "type": "Opaque",
        "data": {
            "token": base64.b64encode(launch.api.token.encode()).decode(),
            crd.SECRET_RENDEZVOUS_KEY: base64.b64encode(rendezvous_key.encode()).decode(),
        },
    }
