"""Pure reconcile of one SampleSet and its SampleJobs: what is observed in, a :class:`SetPlan` out.

    reconcile(Observed: SampleSet, its SampleJobs, their Jobs and Pods, its PV and PVC, the Nodes, now)
      deleting ──▶ delete the SampleJobs' Jobs; a purge Job (``juicefs rmr`` of everything) while the
                   claim exists; once it ended: delete PVC and PV, unlabel the nodes, drop the finalizer
      otherwise ─▶ finalizer; PersistentVolume (JuiceFS CSI, the SampleSet's sub-directory, a cache
                   cap per node) and its claim; phase Ready once the claim is Bound
                   SampleJobs one at a time, oldest first: its Kubernetes Jobs (sync and rmr: one;
                   warmup and clear: one per cache node, pinned there) created, their outcome written
                   to the SampleJob's status when all ended
                   the SampleSet's status replayed from the finished SampleJobs (files and bytes of
                   the last sync / rmr, each node's cached bytes); nodes labelled :func:`cache_label`
                   where the cache holds data, unlabelled elsewhere

Why CSI, not a hostPath mount per node: TrainingJob pods stay within the restricted pod security
level (a PVC, no hostPath, no privilege), the CSI driver (JuiceFS's own, as paddle-operator uses)
owns the FUSE mounts, their cache directories and their clean-up, and nothing of ours runs
privileged (``docs/kubernetes.md``). Calling ``reconcile`` twice on one observation gives the same
plan: what a SampleJob did is recorded in its status, never only in the actions. No clock, no I/O.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from paddlecloud.backends.kubernetes import crd
from paddlecloud.backends.kubernetes import sampleset_crd as ss
from paddlecloud.backends.kubernetes.status import rfc3339
from paddlecloud.core.quantity import format_memory, parse_memory

__all__ = ["CSI_DRIVER", "Observed", "SetPlan", "SetView", "job_object", "read_set", "reconcile"]

Obj = dict[str, Any]
CSI_DRIVER = "csi.juicefs.com"
#: how often a SampleSet with a SampleJob at work is looked at besides watch events
RUNNING_RECHECK_S = 5.0
_FINISHED = ("Succeeded", "Failed")
_PER_NODE = ("warmup", "clear")
_DIR = ss.MOUNT_PATH
#: written by sync and rmr Jobs to their termination message: what the volume holds after
_SUMMARY = (
    f'printf \'{{"files": %s, "bytes": %s}}\' "$(find {_DIR} -type f | wc -l)" '
    f"\"$(find {_DIR} -type f -printf '%s\\n' | awk '{{s += $1}} END {{print s + 0}}')\" "
    "> /dev/termination-log"
)


@dataclass(frozen=True)
class SetView:
    """What reconcile reads from a SampleSet."""

    name: str
    namespace: str
    uid: str
    deleting: bool
    finalizers: tuple[str, ...]
    source_claim: str
    source_path: str
    cache_size: int
    nodes: tuple[str, ...]
    secret: tuple[str, str]  # (namespace, name)
    image: str
    generation: int
    status: Obj

    @property
    def claim(self) -> str:
        return ss.claim_name(self.name)

    @property
    def volume(self) -> str:
        """The PersistentVolume's name (cluster-wide)."""
        return f"sampleset-{self.namespace}-{self.name}"

    @property
    def label(self) -> str:
        return ss.cache_label(self.namespace, self.name)


def read_set(obj: Mapping[str, Any]) -> SetView:
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    source, volume = spec.get("source") or {}, spec.get("volume") or {}
    return SetView(
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or "default"),
        uid=str(meta.get("uid") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        finalizers=tuple(meta.get("finalizers") or ()),
        source_claim=str(source.get("claimName") or ""),
        source_path=str(source.get("path") or "").strip("/"),
        cache_size=parse_memory(spec.get("cacheSize") or 0),
        nodes=tuple(str(n) for n in spec.get("nodes") or ()),
        secret=(str(volume.get("secretNamespace") or ""), str(volume.get("secretName") or "")),
        image=str(spec.get("image") or ss.DEFAULT_IMAGE),
        generation=int(meta.get("generation") or 0),
        status=dict(obj.get("status") or {}),
    )


@dataclass(frozen=True)
class Observed:
    sampleset: Obj
    #: the SampleJobs naming it, the Jobs and Pods labelled with it
    samplejobs: Sequence[Obj] = ()
    jobs: Sequence[Obj] = ()
    pods: Sequence[Obj] = ()
    volume: Obj | None = None
    claim: Obj | None = None
    nodes: Sequence[Obj] = ()


@dataclass(frozen=True)
class SetPlan:
    #: PersistentVolume, PersistentVolumeClaim and Job objects to create
    create: tuple[Obj, ...] = ()
    #: (kind, name): PersistentVolumeClaim, PersistentVolume (cluster-wide) or Job
    delete: tuple[tuple[str, str], ...] = ()
    #: the SampleSet's new status (None: as it is)
    status: Obj | None = None
    #: SampleJob name -> its new status
    job_status: dict[str, Obj] = field(default_factory=dict)
    #: node -> whether it should carry the cache label (only nodes where that changes)
    labels: dict[str, bool] = field(default_factory=dict)
    finalizer: str | None = None  # "add" | "remove"
    requeue_after: float | None = None


# -- objects ----------------------------------------------------------------------------------


def _labels(v: SetView, **more: str) -> dict[str, str]:
    return {crd.LABEL_MANAGED_BY: crd.MANAGED_BY, ss.LABEL_SAMPLESET: v.name, **more}


def _owner(kind: str, meta: Mapping[str, Any]) -> Obj:
    return {"apiVersion": crd.API_VERSION, "kind": kind, "name": meta["name"], "uid": meta.get("uid", "")}


def persistent_volume(v: SetView) -> Obj:
    """The JuiceFS CSI volume: the SampleSet's own sub-directory, its cache cap and cache dir."""
    mib = max(v.cache_size // 2**20, 1)
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": v.volume, "labels": _labels(v, **{crd.LABEL_USER: v.namespace})},
        "spec": {
            "capacity": {"storage": format_memory(max(v.cache_size, 2**20))},
            "volumeMode": "Filesystem",
            "accessModes": ["ReadWriteMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "claimRef": {"namespace": v.namespace, "name": v.claim},
            "mountOptions": [
                f"subdir=/samplesets/{v.uid}",
                f"cache-size={mib}",
                f"cache-dir=/var/jfsCache/{v.volume}",
            ],
            "csi": {
                "driver": CSI_DRIVER,
                "volumeHandle": v.volume,
                "fsType": "juicefs",
                "nodePublishSecretRef": {"namespace": v.secret[0], "name": v.secret[1]},
                "volumeAttributes": {"juicefs/clean-cache": "true"},
            },
        },
    }


def claim(v: SetView, meta: Mapping[str, Any]) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": v.claim,
            "namespace": v.namespace,
            "labels": _labels(v),
            "ownerReferences": [_owner(ss.SET_KIND, meta)],
        },
        "spec": {
            "accessModes": ["ReadWriteMany"],
            "storageClassName": "",
            "volumeName": v.volume,
            "resources": {"requests": {"storage": format_memory(max(v.cache_size, 2**20))}},
        },
    }


def _script(kind: str, path: str) -> str:
    target = shlex.quote(f"{_DIR}/{path}" if path else f"{_DIR}/")
    if kind == "sync":  # new and changed files; files gone from the source go here too
        return f"juicefs sync --dirs --delete-dst /mnt/source/ {_DIR}/ && {_SUMMARY}"
    if kind == "warmup":
        return f"juicefs warmup --threads 16 {target}"
    if kind == "clear":
        return f"juicefs warmup --evict {target}"
    if kind == "rmr":
        return f"juicefs rmr {target} && {_SUMMARY}"
    # purge: everything in the volume, before it is deleted
    return f"find {_DIR} -mindepth 1 -maxdepth 1 -exec juicefs rmr {{}} + ; {_SUMMARY}"


def job_object(
    v: SetView, owner: Mapping[str, Any], kind: str, path: str, index: int, node: str | None
) -> Obj:
    """Kubernetes Job ``<owner>-<index>`` (``<sampleset>-purge``): ``kind``'s juicefs command on the
    SampleSet's claim (and, for sync, the source read-only at /mnt/source); per-node kinds are pinned
    to ``node``."""
    name = f"{owner['name']}-{'purge' if kind == 'purge' else index}"
    lbls = _labels(v, **{ss.LABEL_SAMPLEJOB: str(owner["name"]) if kind != "purge" else name})
    mounts: list[Obj] = [{"name": "sampleset", "mountPath": _DIR}]
    volumes: list[Obj] = [{"name": "sampleset", "persistentVolumeClaim": {"claimName": v.claim}}]
    if kind == "sync":
        mounts.append(
            {"name": "source", "mountPath": "/mnt/source", "subPath": v.source_path, "readOnly": True}
        )
        volumes.append(
            {"name": "source", "persistentVolumeClaim": {"claimName": v.source_claim, "readOnly": True}}
        )
    pod: Obj = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "containers": [
            {
                "name": "juicefs",
                "image": v.image,
                "command": ["/bin/sh", "-c", _script(kind, path)],
                "volumeMounts": mounts,
                "terminationMessagePolicy": "FallbackToLogsOnError",
            }
        ],
        "volumes": volumes,
    }
    if node is not None:
        pod["nodeSelector"] = {"kubernetes.io/hostname": node}
        lbls[f"{crd.GROUP}/node"] = node
    owner_kind = ss.JOB_KIND if kind != "purge" else ss.SET_KIND
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": v.namespace,
            "labels": lbls,
            "ownerReferences": [_owner(owner_kind, owner)],
        },
        "spec": {"backoffLimit": 2, "template": {"metadata": {"labels": lbls}, "spec": pod}},
    }


# -- reading Jobs -------------------------------------------------------------------------------


def _ended(job: Mapping[str, Any]) -> str | None:
    """ "Succeeded" / "Failed" (with the Job's condition) once a Job has ended, else None."""
    st = job.get("status") or {}
    for c in st.get("conditions") or ():
        if c.get("status") == "True" and c.get("type") in ("Complete", "Failed"):
            return "Succeeded" if c["type"] == "Complete" else "Failed"
    return "Succeeded" if int(st.get("succeeded") or 0) > 0 else None


def _why_failed(job: Mapping[str, Any]) -> str:
    for c in (job.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Failed" and c.get("status") == "True":
            return str(c.get("message") or c.get("reason") or "failed")
    return "failed"


def _summary(pods: Sequence[Obj], job: str) -> tuple[int, int] | None:
    """(files, bytes) from the termination message of a Job's pod that exited 0 (None: none)."""
    for pod in pods:
        if (pod.get("metadata") or {}).get("labels", {}).get("job-name") != job:
            continue
        for cs in (pod.get("status") or {}).get("containerStatuses") or ():
            done = (cs.get("state") or {}).get("terminated") or {}
            if done.get("exitCode") == 0 and done.get("message"):
                try:
                    got = json.loads(done["message"])
                    return int(got["files"]), int(got["bytes"])
                except (ValueError, KeyError, TypeError):
                    continue
    return None


# -- reconcile --------------------------------------------------------------------------------


def _targets(v: SetView, nodes: Sequence[Obj]) -> list[str]:
    return list(v.nodes) or sorted(str(n["metadata"]["name"]) for n in nodes)


def _order(sj: Mapping[str, Any]) -> tuple[str, str]:
    meta = sj.get("metadata") or {}
    return str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")


@dataclass
class _Round:
    v: SetView
    seen: Observed
    now: float
    ready: bool
    create: list[Obj] = field(default_factory=list)
    job_status: dict[str, Obj] = field(default_factory=dict)
    running: bool = False

    def samplejob(self, sj: Obj, blocker: str | None) -> None:
        """Drive one unfinished SampleJob (``blocker``: the one it waits for, if any)."""
        meta, spec, old = sj["metadata"], sj.get("spec") or {}, dict(sj.get("status") or {})
        name, kind, path = str(meta["name"]), str(spec.get("kind")), str(spec.get("path") or "")
        if blocker is not None or not self.ready:
            why = (
                f"waiting for SampleJob {blocker} to end"
                if blocker
                else f"waiting for SampleSet {self.v.name} to be Ready"
            )
            self._set(name, old, {"phase": "Pending", "message": why, "done": 0, "total": 0})
            return
        targets = _targets(self.v, self.seen.nodes) if kind in _PER_NODE else [None]
        have = {
            str(j["metadata"]["name"]): j
            for j in self.seen.jobs
            if (j["metadata"].get("labels") or {}).get(ss.LABEL_SAMPLEJOB) == name
        }
        done, failed, nodes = 0, [], []
        for i, node in enumerate(targets):
            job = have.get(f"{name}-{i}")
            if job is None:
                self.create.append(job_object(self.v, meta, kind, path, i, node))
                continue
            ended = _ended(job)
            if ended == "Succeeded":
                done += 1
                nodes += [node] if node else []
            elif ended == "Failed":
                failed.append(f"{'on ' + node + ': ' if node else ''}{_why_failed(job)}")
        new: Obj = {
            "done": done,
            "total": len(targets),
            "startTime": old.get("startTime") or rfc3339(self.now),
        }
        if done + len(failed) < len(targets):
            self.running = True
            new |= {"phase": "Running", "message": f"{kind}: {done} of {len(targets)} Jobs done"}
        else:
            new |= {
                "phase": "Failed" if failed else "Succeeded",
                "nodes": [n for n in nodes if n],
                "completionTime": rfc3339(self.now),
                "message": f"{kind} failed " + "; ".join(failed) if failed else f"{kind} done",
            }
            got = _summary(self.seen.pods, f"{name}-0") if kind in ("sync", "rmr") else None
            if got is not None:
                new["files"], new["bytes"] = got
        self._set(name, old, new)

    def _set(self, name: str, old: Obj, new: Obj) -> None:
        if {k: v for k, v in old.items() if k != "startTime"} != {
            k: v for k, v in new.items() if k != "startTime"
        }:
            self.job_status[name] = new


def _replay(
    v: SetView, samplejobs: Sequence[Obj], statuses: Mapping[str, Obj]
) -> tuple[int, int, dict[str, int]]:
    """(files, bytes, node -> cached bytes) from the SampleJobs that ended, in order: a sync or rmr
    that succeeded gives the volume's files and bytes, a whole-volume warmup or clear counts on the
    nodes where its Job succeeded (also when another node's failed). Cached bytes are what a warmup
    put there: the volume's bytes, at most the cap."""
    files = size = 0
    cached: dict[str, int] = {}
    for sj in samplejobs:
        name = str(sj["metadata"]["name"])
        st = statuses.get(name) or sj.get("status") or {}
        if st.get("phase") not in _FINISHED:
            continue
        kind, path = (sj.get("spec") or {}).get("kind"), (sj.get("spec") or {}).get("path") or ""
        if kind in ("sync", "rmr") and st.get("phase") == "Succeeded" and "bytes" in st:
            files, size = int(st.get("files") or 0), int(st["bytes"])
            cached = {n: min(c, size) for n, c in cached.items()}
        elif kind == "warmup" and not path:
            cached |= {n: min(size, v.cache_size) for n in st.get("nodes") or ()}
        elif kind == "clear" and not path:
            cached |= {n: 0 for n in st.get("nodes") or ()}
    return files, size, cached


def _deleting(v: SetView, seen: Observed) -> SetPlan:
    delete: list[tuple[str, str]] = []
    create: list[Obj] = []
    purge = f"{v.name}-purge"
    for job in seen.jobs:
        if job["metadata"]["name"] != purge:
            delete.append(("Job", str(job["metadata"]["name"])))
    purging = next((j for j in seen.jobs if j["metadata"]["name"] == purge), None)
    labels = {
        str(n["metadata"]["name"]): False
        for n in seen.nodes
        if v.label in ((n.get("metadata") or {}).get("labels") or {})
    }
    status = {**v.status, "phase": "Deleting", "message": "removing the data, the claim and the volume"}
    if seen.claim is not None and seen.volume is not None and (purging is None or _ended(purging) is None):
        if purging is None and _bound(seen.claim):
            create.append(job_object(v, seen.sampleset["metadata"], "purge", "", 0, None))
        elif purging is None:  # never bound: nothing to purge
            return _gone(v, seen, labels, delete)
        return SetPlan(
            create=tuple(create),
            delete=tuple(delete),
            labels=labels,
            status=status if status != v.status else None,
            requeue_after=RUNNING_RECHECK_S,
        )
    return _gone(v, seen, labels, delete + ([("Job", purge)] if purging is not None else []))


def _gone(v: SetView, seen: Observed, labels: dict[str, bool], delete: list[tuple[str, str]]) -> SetPlan:
    if seen.claim is not None:
        delete.append(("PersistentVolumeClaim", v.claim))
    if seen.volume is not None:
        delete.append(("PersistentVolume", v.volume))
    done = crd.FINALIZER not in v.finalizers
    return SetPlan(delete=tuple(delete), labels=labels, finalizer=None if done else "remove")


def _bound(pvc: Mapping[str, Any]) -> bool:
    return (pvc.get("status") or {}).get("phase") == "Bound"


def reconcile(seen: Observed, now: float) -> SetPlan:
    v = read_set(seen.sampleset)
    if v.deleting:
        return _deleting(v, seen)
    meta = seen.sampleset["metadata"]
    create: list[Obj] = []
    if seen.volume is None:
        create.append(persistent_volume(v))
    if seen.claim is None:
        create.append(claim(v, meta))
    ready = seen.claim is not None and _bound(seen.claim)
    rnd = _Round(v, seen, now, ready, create)
    samplejobs = sorted(
        (sj for sj in seen.samplejobs if (sj.get("spec") or {}).get("sampleSet") == v.name), key=_order
    )
    blocker: str | None = None
    for sj in samplejobs:
        if (sj.get("status") or {}).get("phase") in _FINISHED:
            continue
        rnd.samplejob(sj, blocker)
        new = rnd.job_status.get(sj["metadata"]["name"]) or sj.get("status") or {}
        if blocker is None and new.get("phase") not in _FINISHED:
            blocker = str(sj["metadata"]["name"])
    files, size, cached = _replay(v, samplejobs, rnd.job_status)
    targets = _targets(v, seen.nodes)
    status: Obj = {
        "phase": "Ready" if ready else "Pending",
        "message": ""
        if ready
        else f"waiting for claim {v.claim} to be bound to volume {v.volume} "
        f"(is the JuiceFS CSI driver {CSI_DRIVER} installed?)",
        "claimName": v.claim,
        "cacheLabel": v.label,
        "files": files,
        "bytes": size,
        "nodes": [{"node": n, "mounted": ready, "cachedBytes": cached.get(n, 0)} for n in targets],
        "observedGeneration": v.generation,
    }
    labels: dict[str, bool] = {}
    for node in seen.nodes:
        name = str(node["metadata"]["name"])
        want = name in targets and cached.get(name, 0) > 0
        if (v.label in ((node.get("metadata") or {}).get("labels") or {})) != want:
            labels[name] = want
    return SetPlan(
        create=tuple(rnd.create),
        status=None if status == v.status else status,
        job_status=rnd.job_status,
        labels=labels,
        finalizer=None if crd.FINALIZER in v.finalizers else "add",
        requeue_after=RUNNING_RECHECK_S if rnd.running else None,
    )
