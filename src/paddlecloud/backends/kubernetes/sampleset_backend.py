"""The API server's side of SampleSets on Kubernetes: ``KubernetesBackend.samplesets``.

    ensure(ref)          ──▶ create (or patch) SampleSet <name> in the owner's namespace: source = the
                             data claim's sub-directory of ref.source, cache cap, nodes, JuiceFS Secret
    start_task(ref, t)   ──▶ create SampleJob <name>-<t.id> (kind, path), owned by the SampleSet
    task_status(ref, id) ◀── its ``.status`` (phase, done / total Jobs, message)
    status(ref)          ◀── the SampleSet's ``.status`` (files, bytes, per-node mount and cache)
    delete(ref)          ──▶ delete the SampleSet (the operator's finalizer purges the data, deletes
                             the claim and the volume and unlabels the nodes; SampleJobs go with it)

The operator does the work (``sampleset_operator.py``). What cannot work at all is
``SampleSetsUnavailable`` with what to change: no data claim configured, a source outside the data
directory, the CRDs not installed. Unanswered calls are ``BackendUnavailable`` (tried again).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client
from urllib3.exceptions import HTTPError

from paddlecloud.backends.errors import BackendUnavailable
from paddlecloud.backends.kubernetes import crd
from paddlecloud.backends.kubernetes import sampleset_crd as ss
from paddlecloud.backends.kubernetes.kube import Kube, api_message, api_status
from paddlecloud.backends.kubernetes.pods import namespace as namespace_object
from paddlecloud.backends.kubernetes.settings import KubeSettings, sampleset_name, user_namespace
from paddlecloud.backends.samplesets import (
    NodeCache,
    SampleSetRef,
    SampleSetStatus,
    SampleSetsUnavailable,
    SampleTask,
    SampleTaskState,
    SampleTaskStatus,
)

__all__ = ["KubeSampleSets"]

Obj = dict[str, Any]
_API_ERRORS = (client.ApiException, HTTPError, OSError)
_STATES = {"Succeeded": SampleTaskState.SUCCEEDED, "Failed": SampleTaskState.FAILED}


class KubeSampleSets:
    """``SampleSetBackend`` over the SampleSet / SampleJob custom resources."""

    def __init__(self, kube: Kube, settings: KubeSettings, data_dir: Path | None) -> None:
        self.kube, self.settings, self.data_dir = kube, settings, data_dir

    def _where(self, ref: SampleSetRef) -> tuple[str, str]:
        return user_namespace(self.settings, ref.owner), sampleset_name(self.settings, ref.owner, ref.name)

    def _request(self, what: str, fn: Callable[..., Any], *args: Any, ok: tuple[int, ...] = ()) -> Obj | None:
        """One API call; None when it answered a status in ``ok``. The CRDs missing or another refusal
        is ``SampleSetsUnavailable`` (with what the API server said), no answer or a 5xx / 429
        ``BackendUnavailable`` (tried again next cycle)."""
        try:
            return self.kube.call(fn, *args)
        except client.ApiException as exc:
            status = api_status(exc)
            if status in ok:
                return None
            if status == 404 and "could not find the requested resource" in (exc.body or ""):
                raise SampleSetsUnavailable(
                    "the SampleSet and SampleJob CRDs are not installed in the cluster: "
                    "kubectl apply -f deploy/kubernetes/base/sampleset-crd.yaml"
                ) from None
            if status is None or status in (408, 429) or status >= 500:
                raise BackendUnavailable(f"{what}: {api_message(exc)}") from None
            raise SampleSetsUnavailable(f"{what}: {api_message(exc)}") from None
        except (HTTPError, OSError) as exc:
            raise BackendUnavailable(f"{what}: {api_message(exc)}") from None

    def _custom(self, verb: str, ns: str, plural: str, *args: Any, ok: tuple[int, ...] = ()) -> Obj | None:
        """``<verb>_namespaced_custom_object`` on ``plural`` (the first of ``args`` names the object)."""
        fn = getattr(self.kube.custom, f"{verb}_namespaced_custom_object")
        kind = ss.SET_KIND if plural == ss.SET_PLURAL else ss.JOB_KIND
        name = args[0]["metadata"]["name"] if verb == "create" else args[0]
        what = f"{verb} {kind} {ns}/{name}"
        return self._request(what, fn, crd.GROUP, crd.VERSION, ns, plural, *args, ok=ok)

    def _spec(self, ref: SampleSetRef) -> Obj:
        s = self.settings
        if not s.storage_claim:
            raise SampleSetsUnavailable(
                "SampleSets on Kubernetes sync from the platform's data claim: start the server with "
                "--kube-storage-claim CLAIM"
            )
        try:
            if self.data_dir is None:
                raise ValueError
            path = ref.source.resolve().relative_to(self.data_dir.resolve())
        except ValueError:
            raise SampleSetsUnavailable(
                f"the source {ref.source} is not inside the platform's data directory {self.data_dir} "
                f"(the data claim {s.storage_claim})"
            ) from None
        return {
            "source": {"claimName": s.storage_claim, "path": str(path)},
            "cacheSize": str(ref.cache_size),
            "nodes": list(ref.nodes),
            "volume": {"secretName": s.juicefs_secret, "secretNamespace": s.juicefs_secret_namespace},
            "image": s.juicefs_image,
        }

    def ensure(self, ref: SampleSetRef) -> None:
        ns, name = self._where(ref)
        spec = self._spec(ref)
        if self.settings.namespace is None:
            self._request(
                f"creating namespace {ns}", self.kube.core.create_namespace, namespace_object(ns), ok=(409,)
            )
        labels = {crd.LABEL_MANAGED_BY: crd.MANAGED_BY, crd.LABEL_USER: ref.owner}
        notes = {f"{crd.GROUP}/key": ref.key, f"{crd.GROUP}/uid": ref.uid}
        meta = {"name": name, "namespace": ns, "labels": labels, "annotations": notes}
        body = {"apiVersion": crd.API_VERSION, "kind": ss.SET_KIND, "metadata": meta, "spec": spec}
        if self._custom("create", ns, ss.SET_PLURAL, body, ok=(409,)) is None:  # there: the spec may change
            self._custom("patch", ns, ss.SET_PLURAL, name, {"spec": spec})

    def start_task(self, ref: SampleSetRef, task: SampleTask) -> None:
        ns, name = self._where(ref)
        owner = self._custom("get", ns, ss.SET_PLURAL, name) or {}
        own = {
            "apiVersion": crd.API_VERSION,
            "kind": ss.SET_KIND,
            "name": name,
            "uid": owner["metadata"]["uid"],
        }
        labels = {crd.LABEL_MANAGED_BY: crd.MANAGED_BY, ss.LABEL_SAMPLESET: name}
        meta = {"name": f"{name}-{task.id}", "namespace": ns, "labels": labels, "ownerReferences": [own]}
        spec = {"sampleSet": name, "kind": str(task.kind), "path": task.path}
        body = {"apiVersion": crd.API_VERSION, "kind": ss.JOB_KIND, "metadata": meta, "spec": spec}
        self._custom("create", ns, ss.JOB_PLURAL, body, ok=(409,))  # started already: nothing changes

    def task_status(self, ref: SampleSetRef, task_id: str) -> SampleTaskStatus:
        ns, name = self._where(ref)
        sj = self._custom("get", ns, ss.JOB_PLURAL, f"{name}-{task_id}", ok=(404,))
        if sj is None:
            return SampleTaskStatus(
                SampleTaskState.FAILED, message=f"SampleJob {ns}/{name}-{task_id} is gone"
            )
        st = sj.get("status") or {}
        return SampleTaskStatus(
            _STATES.get(str(st.get("phase")), SampleTaskState.RUNNING),
            done=int(st.get("done") or 0),
            total=int(st.get("total") or 0),
            message=str(st.get("message") or ""),
        )

    def status(self, ref: SampleSetRef) -> SampleSetStatus:
        ns, name = self._where(ref)
        st = (self._custom("get", ns, ss.SET_PLURAL, name, ok=(404,)) or {}).get("status") or {}
        nodes = tuple(
            NodeCache(
                str(n.get("node")),
                bool(n.get("mounted")),
                int(n.get("cachedBytes") or 0),
                str(n.get("message") or ""),
            )
            for n in st.get("nodes") or ()
        )
        return SampleSetStatus(files=int(st.get("files") or 0), bytes=int(st.get("bytes") or 0), nodes=nodes)

    def delete(self, ref: SampleSetRef) -> None:
        ns, name = self._where(ref)
        self._custom("delete", ns, ss.SET_PLURAL, name, ok=(404,))
