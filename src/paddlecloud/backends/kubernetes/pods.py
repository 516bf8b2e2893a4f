"""The Kubernetes objects of one TrainingJob: worker Pods, headless Services, a Volcano PodGroup.

    JobView ──topology()──▶ Topology of DNS names ──┐
    JobView, role, index, run ──pod()──────────────┴─▶ Pod dict: init fetch → install → [wait] → worker
    JobView ──services() / podgroup()──────────────────▶ Service dicts / PodGroup dict

A worker's environment is the local backend's (``core.envcontract.worker_env``) with endpoints made
of DNS names (``docs/kubernetes.md``); the token comes from a Secret, the pod IP from the downward
API. Pure: dicts out, no Kubernetes client.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from paddlecloud.backends.kubernetes import crd
from paddlecloud.backends.kubernetes.sampleset_crd import MOUNT_PATH, cache_label, claim_name
from paddlecloud.backends.kubernetes.spec import GPU, JobView, RoleSpec
from paddlecloud.backends.samplesets import SAMPLESET_DIR_ENV
from paddlecloud.core.envcontract import ApiAccess, JobFiles, Topology, WorkerContext, worker_env
from paddlecloud.runtime import contract as c

__all__ = [
    "GLOO_PORT",
    "MASTER_PORT",
    "PSERVER",
    "RENDEZVOUS",
    "TRAINER",
    "WORKER_PORT",
    "WORKSPACE",
    "guaranteed",
    "labels",
    "namespace",
    "owner_reference",
    "pod",
    "pod_name",
    "podgroup",
    "selector",
    "services",
    "topology",
    "trainers_service",
    "worker_name",
]

PSERVER = "pserver"
TRAINER = "trainer"
RENDEZVOUS = "rendezvous"  # an elastic torch job's c10d store (``runtime.rendezvous``)

WORKER_PORT = 6170
GLOO_PORT = 6171  # paddle-ps: the gloo HTTP store beside pserver 0
MASTER_PORT = 6172  # collective / torch: the store on trainer 0, or the rendezvous pod

WORKSPACE = "/paddlecloud"  # emptyDir shared by the init containers and the worker
_ENTRY_ENV = "PADDLECLOUD_ENTRY"
#: every container runs as this non-root user (the PaddleCloud image's ``paddlecloud`` user), so what
#: jobs write to PFS belongs to the same user as what the API server writes (PodSecurity "restricted")
RUN_AS = 1000
_POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": RUN_AS,
    "runAsGroup": RUN_AS,
    "fsGroup": RUN_AS,
    "fsGroupChangePolicy": "OnRootMismatch",
    "seccompProfile": {"type": "RuntimeDefault"},
}
_CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
_HOME = {"name": "HOME", "value": f"{WORKSPACE}/home"}  # writable whatever the image's user
_WRAPPER = (
    f'export PATH="{WORKSPACE}/venv/bin:$PATH" PYTHONPATH="{WORKSPACE}/lib${{PYTHONPATH:+:$PYTHONPATH}}"; '
    f'mkdir -p "$HOME" {WORKSPACE}/run; exec python3 -m paddlecloud.runtime.launcher '
    f'--status {WORKSPACE}/run/exit.json --cwd {WORKSPACE}/job "${_ENTRY_ENV}"'
)
_INSTALL = (
    f"PYTHONPATH={WORKSPACE}/lib exec python3 -m paddlecloud.runtime.bootstrap install --dest {WORKSPACE}"
)
_RENDEZVOUS_ENTRY = (
    f"python -c 'from paddlecloud.runtime.rendezvous import serve; serve({MASTER_PORT}, \"0.0.0.0\")'"
)

Obj = dict[str, Any]

#: what the rendezvous store's pod asks for, and is limited to (it only hosts a TCPStore, but its
#: install init container runs pip on the job's requirements.txt in as much)
_RENDEZVOUS_RESOURCES = RoleSpec(1, {"cpu": "250m", "memory": "1Gi"})


def _role_spec(job: JobView, role: str) -> RoleSpec:
    if role == RENDEZVOUS:
        return _RENDEZVOUS_RESOURCES
    return job.pserver if role == PSERVER else job.trainer


# -- names ------------------------------------------------------------------------------------


def worker_name(role: str, index: int) -> str:
    """The worker's name in the platform (``get workers``, ``PADDLECLOUD_WORKER``)."""
    return f"{role}-{index}"


def pod_name(job: str, role: str, index: int) -> str:
    return f"{job}-{RENDEZVOUS}" if role == RENDEZVOUS else f"{job}-{role}-{index}"


def trainers_service(job: str) -> str:
    return f"{job}-trainers"


def topology(job: JobView) -> Topology:
    """Every worker's ``host:port``: Service DNS names in the job's namespace."""
    ns = job.namespace
    ps = [f"{job.name}-pserver-{i}.{ns}.svc:{WORKER_PORT}" for i in range(job.pserver.replicas)]
    tr = [f"trainer-{i}.{trainers_service(job.name)}.{ns}.svc:{WORKER_PORT}" for i in range(job.trainers)]
    if job.elastic_torch:
        master = f"{pod_name(job.name, RENDEZVOUS, 0)}.{ns}.svc:{MASTER_PORT}"
    else:
        master = f"{tr[0].rpartition(':')[0]}:{MASTER_PORT}" if tr else ""
    gloo = f"{ps[0].rpartition(':')[0]}:{GLOO_PORT}" if ps else ""
    return Topology(ps, tr, gloo_endpoint=gloo, master_endpoint=master)


def selector(job: str, role: str | None = None, index: int | None = None) -> dict[str, str]:
    sel = {crd.LABEL_JOB: job}
    if role is not None:
        sel[crd.LABEL_ROLE] = role
    if index is not None:
        sel[crd.LABEL_INDEX] = str(index)
    return sel


def labels(job: JobView, role: str | None = None, index: int | None = None) -> dict[str, str]:
    out = {crd.LABEL_MANAGED_BY: crd.MANAGED_BY, crd.LABEL_USER: job.user, **selector(job.name, role, index)}
    if job.scheduling.queue and not job.scheduling.volcano:
        out["kueue.x-k8s.io/queue-name"] = job.scheduling.queue
    return out


def owner_reference(job: JobView) -> Obj:
    return {
        "apiVersion": crd.API_VERSION,
        "kind": crd.KIND,
        "name": job.name,
        "uid": job.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _meta(job: JobView, name: str, lbls: dict[str, str]) -> Obj:
    return {
        "name": name,
        "namespace": job.namespace,
        "labels": lbls,
        "ownerReferences": [owner_reference(job)],
    }


# -- environment ------------------------------------------------------------------------------


def _context(job: JobView, role: str, index: int, run: int) -> WorkerContext:
    spec = _role_spec(job, role)
    mounted = job.storage is not None
    return WorkerContext(
        job_name=job.job_name,
        user=job.user,
        framework=job.framework,
        role=role,
        index=index,
        topology=topology(job),
        output_dir=job.output if mounted else "",
        restart=run,
        files=JobFiles(input_dir=job.input if mounted else "", input=job.input, output=job.output),
        gpus=tuple(range(spec.gpus)) if spec.gpus else None,
        trainer_range=job.trainer_range,
        user_env=job.env,
        api=ApiAccess(url=job.api),
    )


def _token_env(job: JobView, rendezvous: bool = False) -> list[Obj]:
    """The job token from the job's Secret and, with ``rendezvous`` (elastic torch), the job's
    rendezvous key (optional: a TrainingJob written before the key existed has a Secret without it,
    and its agents then refuse to run, ``runtime.torchelastic``)."""
    if not job.token_secret:
        return []
    ref = {"secretKeyRef": {"name": job.token_secret, "key": "token"}}
    out: list[Obj] = [{"name": c.JOB_TOKEN, "valueFrom": ref}]
    if rendezvous:
        key = {"secretKeyRef": {"name": job.token_secret, "key": crd.SECRET_RENDEZVOUS_KEY, "optional": True}}
        out.append({"name": c.RDZV_KEY, "valueFrom": key})
    return out


def _env_list(job: JobView, env: dict[str, str]) -> list[Obj]:
    """Variables in pod form: the token (and the rendezvous key) from the job's Secret, the pod IP
    from the downward API."""
    out: list[Obj] = []
    for name, value in env.items():
        if name in (c.JOB_TOKEN, c.RDZV_KEY):
            continue
        if name in (c.POD_IP, "POD_IP") and name not in job.env:
            out.append({"name": name, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
        else:
            out.append({"name": name, "value": value})
    return out + _token_env(job, rendezvous=c.RDZV_KEY in env)


def _home(job: JobView) -> list[Obj]:
    return [] if "HOME" in job.env else [dict(_HOME)]


def _worker_env(job: JobView, role: str, index: int, run: int) -> list[Obj]:
    if role == RENDEZVOUS:
        env = {c.JOB_NAME: job.job_name, c.JOB_USER: job.user, c.ROLE: role, "PYTHONUNBUFFERED": "1"}
        env[_ENTRY_ENV] = _RENDEZVOUS_ENTRY
        return _home(job) + _env_list(job, env)
    env = worker_env(_context(job, role, index, run))
    env.pop("NVIDIA_VISIBLE_DEVICES", None)  # the device plugin sets it to the pod's GPUs
    if job.sampleset:
        env[SAMPLESET_DIR_ENV] = MOUNT_PATH
    env[_ENTRY_ENV] = job.entry
    return _home(job) + _env_list(job, env)


# -- containers -------------------------------------------------------------------------------


def guaranteed(spec: RoleSpec) -> dict[str, str]:
    """A role's amounts as one map, both the requests and the limits of its containers: each
    resource's limit where the spec gives one (Kubernetes requires it >= the request), else its
    request. So a pod is killed or throttled at exactly what it was scheduled with (QoS
    Guaranteed): ``--memory`` is its memory cgroup's limit, ``--cpu`` its CFS quota, GPUs and
    ``ephemeral-storage`` likewise. Quantities are strings in the Pod API (the CRD also allows
    integers, e.g. ``nvidia.com/gpu: 1``)."""
    return {k: str(v) for k, v in {**spec.requests, **spec.limits}.items()}


def _resources(spec: RoleSpec, gpus: bool = True) -> Obj:
    amounts = {k: v for k, v in guaranteed(spec).items() if gpus or k != GPU}
    return {"requests": amounts, "limits": dict(amounts)} if amounts else {}


def _package_url(job: JobView) -> str:
    if job.package_url:
        return job.package_url
    return f"{job.api}/api/v1/pfs/file?path={quote(job.package_path, safe='/')}"


def _init_containers(job: JobView, role: str, spec: RoleSpec) -> list[Obj]:
    """fetch (platform image), install (job image), and for trainers wait (platform image)."""
    small = _resources(spec, gpus=False)
    mount = [{"name": "workspace", "mountPath": WORKSPACE}]
    fetch_env = [{"name": "PADDLECLOUD_PACKAGE_URL", "value": _package_url(job)}, *_token_env(job)]
    user_env = _home(job) + [{"name": k, "value": v} for k, v in job.env.items()]  # PIP_INDEX_URL, ...
    out: list[Obj] = [
        {
            "name": "fetch",
            "image": job.platform_image,
            "command": ["python", "-m", "paddlecloud.runtime.bootstrap", "fetch", "--dest", WORKSPACE],
            "env": fetch_env,
            "resources": small,
            "volumeMounts": mount,
            "terminationMessagePolicy": "FallbackToLogsOnError",
        },
        {
            "name": "install",
            "image": job.image,
            # the registry checks the pull secret on every start: a private image another user's pod
            # left on the node is never run without its owner's credentials (AlwaysPullImages' reason)
            "imagePullPolicy": "Always",
            "command": ["/bin/sh", "-c", _INSTALL],
            "env": user_env,
            "resources": small,
            "volumeMounts": mount,
            "terminationMessagePolicy": "FallbackToLogsOnError",
        },
    ]
    waits = _waits_for(job, role)
    if waits:
        out.append(
            {
                "name": "wait",
                "image": job.platform_image,
                "command": ["python", "-m", "paddlecloud.runtime.bootstrap", "wait", *waits],
                "resources": small,
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }
        )
    return out


def _waits_for(job: JobView, role: str) -> list[str]:
    """What a trainer waits for before it starts: every pserver, or the rendezvous store."""
    if role != TRAINER:
        return []
    t = topology(job)
    if job.elastic_torch:
        return [t.master_endpoint]
    return list(t.pserver_endpoints)


def _ports(job: JobView, role: str, index: int) -> list[Obj]:
    if role == RENDEZVOUS:
        return [{"name": "master", "containerPort": MASTER_PORT}]
    ports = [{"name": "worker", "containerPort": WORKER_PORT}]
    if role == PSERVER and index == 0:
        ports.append({"name": "gloo", "containerPort": GLOO_PORT})
    if role == TRAINER and index == 0 and not job.elastic_torch:
        ports.append({"name": "master", "containerPort": MASTER_PORT})
    return ports


def _pfs_mounts(job: JobView) -> list[Obj]:
    """The user's PFS home (read-write), public (read-only), and an input / output elsewhere."""
    s = job.storage
    if s is None:
        return []
    root = f"/pfs/{s.datacenter}"
    home = f"{root}/home/{job.user}"
    mounts: list[Obj] = [
        {"name": "pfs", "mountPath": home, "subPath": f"{s.files_path}/home/{job.user}"},
        {"name": "pfs", "mountPath": f"{root}/public", "subPath": f"{s.files_path}/public", "readOnly": True},
    ]
    for path, read_only in ((job.input, True), (job.output, False)):
        inside = any(path == p or path.startswith(p + "/") for p in (home, f"{root}/public"))
        if path.startswith(root + "/") and not inside:
            rest = path[len(root) + 1 :].rstrip("/")
            mounts.append(
                {"name": "pfs", "mountPath": path, "subPath": f"{s.files_path}/{rest}", "readOnly": read_only}
            )
    return mounts


def _sampleset_mounts(job: JobView, role: str) -> list[Obj]:
    """A job's SampleSet, read-only at /mnt/sampleset in its workers (not the rendezvous)."""
    if not job.sampleset or role == RENDEZVOUS:
        return []
    return [{"name": "sampleset", "mountPath": MOUNT_PATH, "readOnly": True}]


def _sampleset(job: JobView, role: str, spec: Obj) -> None:
    """The SampleSet's claim as a volume of a worker's pod, and for trainers a preference for the
    nodes whose cache holds it (the label the operator puts there; a preference, never a must)."""
    if not job.sampleset or role == RENDEZVOUS:
        return
    claim = {"claimName": claim_name(job.sampleset), "readOnly": True}
    spec["volumes"].append({"name": "sampleset", "persistentVolumeClaim": claim})
    if role == TRAINER:
        cached = {"key": cache_label(job.namespace, job.sampleset), "operator": "Exists"}
        prefer = [{"weight": 100, "preference": {"matchExpressions": [cached]}}]
        spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": prefer}}


def _probe(port: int) -> Obj:
    return {"tcpSocket": {"port": port}, "periodSeconds": 2, "timeoutSeconds": 1, "failureThreshold": 3}


def _worker_container(job: JobView, role: str, index: int, run: int) -> Obj:
    spec = _role_spec(job, role)
    container: Obj = {
        "name": "worker",
        "image": job.image,
        "imagePullPolicy": "Always",
        "command": ["/bin/sh", "-c", _WRAPPER],
        "workingDir": f"{WORKSPACE}/job",
        "env": _worker_env(job, role, index, run),
        "ports": _ports(job, role, index),
        "resources": _resources(spec),
        "volumeMounts": [
            {"name": "workspace", "mountPath": WORKSPACE},
            *_pfs_mounts(job),
            *_sampleset_mounts(job, role),
        ],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if role == PSERVER:
        container["readinessProbe"] = _probe(WORKER_PORT)
    elif role == RENDEZVOUS:
        container["readinessProbe"] = _probe(MASTER_PORT)
    return container


# -- objects ----------------------------------------------------------------------------------


def _pod_spec(job: JobView, role: str, index: int, run: int) -> Obj:
    spec_role = _role_spec(job, role)
    volumes: list[Obj] = [{"name": "workspace", "emptyDir": {}}]
    if job.storage is not None:
        volumes.append({"name": "pfs", "persistentVolumeClaim": {"claimName": job.storage.claim}})
    inits = _init_containers(job, role, spec_role)
    worker = _worker_container(job, role, index, run)
    for container in (*inits, worker):
        container["securityContext"] = dict(_CONTAINER_SECURITY)
    spec: Obj = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": job.grace,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": dict(_POD_SECURITY),
        "initContainers": inits,
        "containers": [worker],
        "volumes": volumes,
    }
    if job.image_pull_secret:
        spec["imagePullSecrets"] = [{"name": job.image_pull_secret}]
    _sampleset(job, role, spec)
    if role == TRAINER:
        spec["hostname"] = worker_name(TRAINER, index)
        spec["subdomain"] = trainers_service(job.name)
    sched = job.scheduling
    if sched.scheduler_name:
        spec["schedulerName"] = sched.scheduler_name
    if sched.priority_class:
        spec["priorityClassName"] = sched.priority_class
    return spec


def pod(job: JobView, role: str, index: int, run: int) -> Obj:
    """The Pod of worker ``<role>-<index>``, its run ``run`` (``PADDLECLOUD_RESTART``)."""
    lbls = {**labels(job, role, index), crd.LABEL_RUN: str(run)}
    meta = _meta(job, pod_name(job.name, role, index), lbls)
    meta["annotations"] = {f"{crd.GROUP}/worker": worker_name(role, index), f"{crd.GROUP}/entry": job.entry}
    if job.scheduling.volcano:
        meta["annotations"]["scheduling.k8s.io/group-name"] = job.name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": _pod_spec(job, role, index, run)}


def namespace(name: str) -> Obj:
    """A per-user job namespace (``paddlecloud-<user>``): the cluster itself refuses any pod there
    that is not PodSecurity ``restricted`` (the worker pods above are)."""
    security = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "audit", "warn")}
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {crd.LABEL_MANAGED_BY: crd.MANAGED_BY, **security}},
    }


def _service(job: JobView, name: str, sel: dict[str, str], ports: list[tuple[str, int]]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(job, name, labels(job)),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": sel,
            "ports": [{"name": n, "port": p, "targetPort": p, "protocol": "TCP"} for n, p in ports],
        },
    }


def services(job: JobView) -> list[Obj]:
    """Headless Services: one per pserver, one for the trainers, one for the rendezvous store."""
    out = []
    for i in range(job.pserver.replicas):
        ports = [("worker", WORKER_PORT)] + ([("gloo", GLOO_PORT)] if i == 0 else [])
        out.append(_service(job, pod_name(job.name, PSERVER, i), selector(job.name, PSERVER, i), ports))
    trainer_ports = [("worker", WORKER_PORT)] + ([] if job.elastic_torch else [("master", MASTER_PORT)])
    out.append(_service(job, trainers_service(job.name), selector(job.name, TRAINER), trainer_ports))
    if job.elastic_torch:
        name = pod_name(job.name, RENDEZVOUS, 0)
        out.append(_service(job, name, selector(job.name, RENDEZVOUS), [("master", MASTER_PORT)]))
    return out


def podgroup(job: JobView) -> Obj:
    """Volcano's gang: ``minMember`` pods (pservers + min trainers, or ``scheduling.minAvailable``)."""
    helpers = 1 if job.elastic_torch else 0
    spec: Obj = {
        "minMember": job.scheduling.min_available or job.pserver.replicas + job.trainer_min + helpers
    }
    if job.scheduling.queue:
        spec["queue"] = job.scheduling.queue
    if job.scheduling.priority_class:
        spec["priorityClassName"] = job.scheduling.priority_class
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": _meta(job, job.name, labels(job)),
        "spec": spec,
    }
