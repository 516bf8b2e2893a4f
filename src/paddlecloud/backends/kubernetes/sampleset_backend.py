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

    def _call(self, what: str, fn: Callable[..., Any], *args: Any) -> Obj:
        """One API call; the CRD missing is ``SampleSetsUnavailable``, no answer ``BackendUnavailable``."""
        try:
            return self.kube.call(fn, *args)
        except client.ApiException as exc:
            body = exc.body or ""
            if api_status(exc) == 404 and "could not find the requested resource" in body:
                raise SampleSetsUnavailable(
                    "the SampleSet and SampleJob CRDs are not installed in the cluster: "
                    "kubectl apply -f deploy/kubernetes/base/sampleset-crd.yaml"
                ) from None
            if api_status(exc) is None or (api_status(exc) or 0) >= 500:
                raise BackendUnavailable(f"{what}: {api_message(exc)}") from None
            raise
        except (HTTPError, OSError) as exc:
            raise BackendUnavailable(f"{what}: {api_message(exc)}") from None

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
        k, g, v = self.kube, crd.GROUP, crd.VERSION
        if self.settings.namespace is None:
            try:
                k.call(k.core.create_namespace, namespace_object(ns))
            except client.ApiException as exc:
                if api_status(exc) != 409:
                    raise BackendUnavailable(f"creating namespace {ns}: {api_message(exc)}") from None
        body = {
            "apiVersion": crd.API_VERSION,
            "kind": ss.SET_KIND,
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {crd.LABEL_MANAGED_BY: crd.MANAGED_BY, crd.LABEL_USER: ref.owner},
                "annotations": {f"{crd.GROUP}/key": ref.key, f"{crd.GROUP}/uid": ref.uid},
            },
            "spec": spec,
        }
        try:
            self._call(
                f"creating SampleSet {ns}/{name}",
                k.custom.create_namespaced_custom_object,
                g,
                v,
                ns,
                ss.SET_PLURAL,
                body,
            )
        except client.ApiException as exc:
            if api_status(exc) != 409:
                raise SampleSetsUnavailable(f"creating SampleSet {ns}/{name}: {api_message(exc)}") from None
            self._call(
                f"updating SampleSet {ns}/{name}",
                k.custom.patch_namespaced_custom_object,
                g,
                v,
                ns,
                ss.SET_PLURAL,
                name,
                {"spec": spec},
            )

    def start_task(self, ref: SampleSetRef, task: SampleTask) -> None:
        ns, name = self._where(ref)
        k, g, v = self.kube, crd.GROUP, crd.VERSION
        owner = self._call(
            f"reading SampleSet {ns}/{name}",
            k.custom.get_namespaced_custom_object,
            g,
            v,
            ns,
            ss.SET_PLURAL,
            name,
        )
        body = {
            "apiVersion": crd.API_VERSION,
            "kind": ss.JOB_KIND,
            "metadata": {
                "name": f"{name}-{task.id}",
                "namespace": ns,
                "labels": {crd.LABEL_MANAGED_BY: crd.MANAGED_BY, ss.LABEL_SAMPLESET: name},
                "ownerReferences": [
                    {
                        "apiVersion": crd.API_VERSION,
                        "kind": ss.SET_KIND,
                        "name": name,
                        "uid": owner["metadata"]["uid"],
                    }
                ],
            },
            "spec": {"sampleSet": name, "kind": str(task.kind), "path": task.path},
        }
        try:
            self._call(
                f"creating SampleJob {ns}/{name}-{task.id}",
                k.custom.create_namespaced_custom_object,
                g,
                v,
                ns,
                ss.JOB_PLURAL,
                body,
            )
        except client.ApiException as exc:
            if api_status(exc) != 409:  # started already: nothing changes
                raise BackendUnavailable(
                    f"creating SampleJob {ns}/{name}-{task.id}: {api_message(exc)}"
                ) from None

    def task_status(self, ref: SampleSetRef, task_id: str) -> SampleTaskStatus:
        ns, name = self._where(ref)
        k = self.kube
        try:
            sj = self._call(
                f"reading SampleJob {ns}/{name}-{task_id}",
                k.custom.get_namespaced_custom_object,
                crd.GROUP,
                crd.VERSION,
                ns,
                ss.JOB_PLURAL,
                f"{name}-{task_id}",
            )
        except client.ApiException as exc:
            if api_status(exc) == 404:
                return SampleTaskStatus(
                    SampleTaskState.FAILED, message=f"SampleJob {ns}/{name}-{task_id} is gone"
                )
            raise BackendUnavailable(f"reading SampleJob {ns}/{name}-{task_id}: {api_message(exc)}") from None
        st = sj.get("status") or {}
        return SampleTaskStatus(
            _STATES.get(str(st.get("phase")), SampleTaskState.RUNNING),
            done=int(st.get("done") or 0),
            total=int(st.get("total") or 0),
            message=str(st.get("message") or ""),
        )

    def status(self, ref: SampleSetRef) -> SampleSetStatus:
        ns, name = self._where(ref)
        k = self.kube
        try:
            obj = self._call(
                f"reading SampleSet {ns}/{name}",
                k.custom.get_namespaced_custom_object,
                crd.GROUP,
                crd.VERSION,
                ns,
                ss.SET_PLURAL,
                name,
            )
        except client.ApiException as exc:
            if api_status(exc) == 404:
                return SampleSetStatus()
            raise BackendUnavailable(f"reading SampleSet {ns}/{name}: {api_message(exc)}") from None
        st = obj.get("status") or {}
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
        k = self.kube
        try:
            self._call(
                f"deleting SampleSet {ns}/{name}",
                k.custom.delete_namespaced_custom_object,
                crd.GROUP,
                crd.VERSION,
                ns,
                ss.SET_PLURAL,
                name,
            )
        except client.ApiException as exc:
            if api_status(exc) != 404:
                raise BackendUnavailable(f"deleting SampleSet {ns}/{name}: {api_message(exc)}") from None
