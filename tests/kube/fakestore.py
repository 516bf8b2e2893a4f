"""The state of the fake Kubernetes API server: typed objects, resource versions, watch history.

    request ──▶ Store.create / replace / patch / delete / scale_*   (one event loop thread only)
                   │ _commit: subresource gating (main vs /status), defaults, schema (CRs),
                   │          preconditions (409), no-op detection, generation, resourceVersion
                   ▼
                objects[(group, plural, ns, name)]   history (bounded)   listeners (live watches)
                   │ finalizers: DELETE sets deletionTimestamp; the object goes once they are empty
                   └ garbage collection: an object removed deletes its dependents (ownerReferences)

Resource versions are one global counter, as in etcd. History keeps the last ``history`` events;
a watch from a resource version older than what history still holds gets 410 Gone (``compact()``
forces that). Custom resources exist only once their CRD was created (discovery follows the CRDs).
"""

from __future__ import annotations

import copy
import datetime
import itertools
import re
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.kube.fakepatch import (
    ApiError,
    LabelSelector,
    apply_schema,
    field_matches,
    json_patch,
    merge_patch,
    strategic_merge,
)

__all__ = ["Event", "Listener", "ResourceType", "ScalePaths", "Store"]

Obj = dict[str, Any]
Key = tuple[str, str, str, str]  # group, plural, namespace ("" for cluster-scoped), name

_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


@dataclass(frozen=True)
class ScalePaths:
    spec_replicas: str
    status_replicas: str
    label_selector: str | None = None


@dataclass(frozen=True)
class ResourceType:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: frozenset[str] = frozenset()
    short_names: tuple[str, ...] = ()
    scale: ScalePaths | None = None
    schema: dict[str, Any] | None = None
    categories: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()


def _core(plural: str, kind: str, namespaced: bool, *subs: str, short: tuple[str, ...] = ()) -> ResourceType:
    return ResourceType("", "v1", plural, kind, namespaced, frozenset(subs), short)


BUILTINS = (
    _core("namespaces", "Namespace", False, "status", short=("ns",)),
    _core("nodes", "Node", False, "status", short=("no",)),
    _core("pods", "Pod", True, "status", "log", "binding", short=("po",)),
    _core("services", "Service", True, "status", short=("svc",)),
    _core("events", "Event", True, short=("ev",)),
    _core("configmaps", "ConfigMap", True, short=("cm",)),
    _core("secrets", "Secret", True),
    _core("serviceaccounts", "ServiceAccount", True, short=("sa",)),
    _core("persistentvolumeclaims", "PersistentVolumeClaim", True, "status", short=("pvc",)),
    _core("persistentvolumes", "PersistentVolume", False, "status", short=("pv",)),
    ResourceType("batch", "v1", "jobs", "Job", True, frozenset({"status"}), ()),
    ResourceType(
        "networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", True, frozenset(), ("netpol",)
    ),
    ResourceType(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        False,
        frozenset({"status"}),
        ("crd", "crds"),
    ),
)


@dataclass(frozen=True)
class Event:
    rv: int
    group: str
    plural: str
    type: str  # ADDED | MODIFIED | DELETED
    obj: Obj
    old: Obj | None = None  # the object before a MODIFIED (selector transitions)


@dataclass
class Listener:
    group: str
    plural: str
    namespace: str | None
    labels: LabelSelector
    fields: str | None
    send: Callable[[str, Obj], None]

    def offer(self, ev: Event) -> None:
        if (ev.group, ev.plural) != (self.group, self.plural):
            return
        ns = ev.obj.get("metadata", {}).get("namespace", "")
        if self.namespace is not None and ns != self.namespace:
            return
        now = self._matches(ev.obj)
        before = ev.old is not None and self._matches(ev.old)
        if ev.type == "MODIFIED" and before != now:  # moved into or out of the selection
            self.send("ADDED" if now else "DELETED", ev.obj)
        elif now:
            self.send(ev.type, ev.obj)

    def _matches(self, obj: Obj) -> bool:
        return self.labels.matches(obj.get("metadata", {}).get("labels")) and field_matches(obj, self.fields)


def now_iso() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def get_path(obj: Obj, path: str) -> Any:
    node: Any = obj
    for part in path.strip(".").split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def set_path(obj: Obj, path: str, value: Any) -> None:
    parts = path.strip(".").split(".")
    node = obj
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value


@dataclass
class Store:
    history: int = 1000
    rv: int = 100
    floor: int = 100  # watches from a resource version below this get 410 Gone
    types: dict[tuple[str, str, str], ResourceType] = field(default_factory=dict)
    objects: dict[Key, Obj] = field(default_factory=dict)
    events: deque[Event] = field(default_factory=deque)
    listeners: list[Listener] = field(default_factory=list)
    #: what schema pruning removed from custom resources: (kind/name, field path)
    pruned: list[tuple[str, str]] = field(default_factory=list)
    #: pod logs: (namespace, pod, container) -> [current run, previous run]
    logs: dict[tuple[str, str, str], list[bytes]] = field(default_factory=dict)
    _ips: Iterator[int] = field(default_factory=lambda: itertools.count(10))

    def __post_init__(self) -> None:
        for rt in BUILTINS:
            self.types[(rt.group, rt.version, rt.plural)] = rt
        for ns in ("default", "kube-system"):
            self.create(self.type("", "v1", "namespaces"), None, {"metadata": {"name": ns}})

    # -- types ------------------------------------------------------------------------------------

    def type(self, group: str, version: str, plural: str) -> ResourceType:
        rt = self.types.get((group, version, plural))
        if rt is None:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({plural})")
        return rt

    def _register_crd(self, crd: Obj) -> None:
        spec = crd.get("spec", {})
        names = spec.get("names", {})
        for v in spec.get("versions", []):
            if not v.get("served", True):
                continue
            subs = v.get("subresources") or {}
            scale = subs.get("scale")
            rt = ResourceType(
                group=spec["group"], version=v["name"], plural=names["plural"], kind=names["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                subresources=frozenset(k for k in ("status", "scale") if k in subs),
                short_names=tuple(names.get("shortNames", [])),
                scale=ScalePaths(
                    scale["specReplicasPath"], scale["statusReplicasPath"], scale.get("labelSelectorPath")
                ) if scale else None,
                schema=(v.get("schema") or {}).get("openAPIV3Schema"),
                categories=tuple(names.get("categories", [])),
            )  # fmt: skip
            self.types[(rt.group, rt.version, rt.plural)] = rt

    def _unregister_crd(self, crd: Obj) -> None:
        spec = crd.get("spec", {})
        group, plural = spec.get("group"), spec.get("names", {}).get("plural")
        for key in [k for k in self.objects if k[0] == group and k[1] == plural]:
            self._remove(key)
        for k in [k for k in self.types if k[0] == group and k[2] == plural]:
            del self.types[k]

    # -- reads ------------------------------------------------------------------------------------

    def _key(self, rt: ResourceType, ns: str | None, name: str) -> Key:
        return (rt.group, rt.plural, (ns or "") if rt.namespaced else "", name)

    def get(self, rt: ResourceType, ns: str | None, name: str) -> Obj:
        obj = self.objects.get(self._key(rt, ns, name))
        if obj is None:
            raise ApiError(
                404, "NotFound", f'{rt.plural}{"." + rt.group if rt.group else ""} "{name}" not found',
                {"name": name, "group": rt.group, "kind": rt.plural},
            )  # fmt: skip
        return copy.deepcopy(obj)

    def list(self, rt: ResourceType, ns: str | None, labels: str | None, fields: str | None) -> Obj:
        sel = LabelSelector.parse(labels)
        items = [
            copy.deepcopy(o)
            for (g, p, ons, _), o in sorted(self.objects.items())
            if (g, p) == (rt.group, rt.plural)
            and (ns is None or ons == ns)
            and sel.matches(o["metadata"].get("labels"))
            and field_matches(o, fields)
        ]
        return {
            "kind": f"{rt.kind}List",
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": str(self.rv)},
            "items": items,
        }

    def since(self, rt: ResourceType, rv: int) -> list[Event]:
        """Events of ``rt`` after ``rv`` (a watch resuming); 410 Gone when history lost some."""
        if rv < self.floor:
            raise ApiError(410, "Expired", f"too old resource version: {rv} ({self.floor})")
        return [e for e in self.events if e.rv > rv and (e.group, e.plural) == (rt.group, rt.plural)]

    def compact(self) -> None:
        """Forget the watch history: every watch resuming from an earlier version gets 410."""
        self.events.clear()
        self.floor = self.rv

    # -- writes -----------------------------------------------------------------------------------

    def create(self, rt: ResourceType, ns: str | None, body: Obj) -> Obj:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            if meta.get("namespace") not in (None, "", ns):
                raise ApiError(400, "BadRequest", "the namespace of the provided object does not match")
            meta["namespace"] = ns
            self.get(self.type("", "v1", "namespaces"), None, ns or "")  # 404 if it does not exist
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        name = meta.get("name") or ""
        self._validate_meta(rt, meta)
        key = self._key(rt, ns, name)
        if key in self.objects:
            raise ApiError(
                409, "AlreadyExists", f'{rt.plural} "{name}" already exists',
                {"name": name, "group": rt.group, "kind": rt.plural},
            )  # fmt: skip
        if "status" in rt.subresources and rt.kind != "Node":  # status only through /status
            obj.pop("status", None)
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        for k in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(k, None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now_iso(), generation=1)
        obj = self._defaults(rt, obj, None, None)
        self._bump(obj)
        self.objects[key] = obj
        self._emit(rt, "ADDED", obj)
        if rt.plural == "customresourcedefinitions":
            self._register_crd(obj)
        return copy.deepcopy(obj)

    def replace(self, rt: ResourceType, ns: str | None, name: str, body: Obj, sub: str | None) -> Obj:
        old = self.get(rt, ns, name)
        return self._commit(rt, old, copy.deepcopy(body), sub)

    def patch(
        self, rt: ResourceType, ns: str | None, name: str, ctype: str, body: Any, sub: str | None
    ) -> Obj:
        old = self.get(rt, ns, name)
        new = self._patched(rt, old, ctype, body)
        merge = ctype.startswith(("application/merge-patch", "application/strategic"))
        if merge and (body.get("metadata") or {}).get("resourceVersion") is None:
            new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        return self._commit(rt, old, new, sub)

    @staticmethod
    def _patched(rt: ResourceType, old: Obj, ctype: str, body: Any) -> Obj:
        ctype = ctype.split(";")[0].strip()
        if ctype == "application/merge-patch+json":
            return dict(merge_patch(old, body))
        if ctype == "application/json-patch+json":
            return dict(json_patch(old, body))
        if ctype == "application/strategic-merge-patch+json":
            if rt.group and rt.group not in ("apiextensions.k8s.io", "batch"):  # custom resources
                raise ApiError(
                    415, "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types include: "
                    f"application/json-patch+json, application/merge-patch+json ({ctype} on {rt.kind})",
                )  # fmt: skip
            return dict(strategic_merge(old, body))
        raise ApiError(415, "UnsupportedMediaType", f"unsupported patch type {ctype!r}")

    def delete(self, rt: ResourceType, ns: str | None, name: str, options: Obj | None) -> Obj:
        options = options or {}
        obj = self.get(rt, ns, name)
        pre = options.get("preconditions") or {}
        meta = obj["metadata"]
        if pre.get("resourceVersion") not in (None, meta["resourceVersion"]) or pre.get("uid") not in (
            None,
            meta["uid"],
        ):
            raise ApiError(409, "Conflict", f'Precondition failed for {rt.plural} "{name}"')
        policy = options.get("propagationPolicy") or "Background"
        key = self._key(rt, ns, name)
        if meta.get("deletionTimestamp"):
            return obj  # already being deleted
        if policy == "Foreground":
            self._cascade(meta["uid"])
        if not meta.get("finalizers"):
            return self._remove(key, orphan=policy == "Orphan")
        new = copy.deepcopy(obj)
        new["metadata"]["deletionTimestamp"] = now_iso()
        new["metadata"]["deletionGracePeriodSeconds"] = int(options.get("gracePeriodSeconds") or 0)
        self._bump(new)
        self.objects[key] = new
        self._emit(rt, "MODIFIED", new, obj)
        return copy.deepcopy(new)

    # -- /scale -----------------------------------------------------------------------------------

    def scale_get(self, rt: ResourceType, ns: str | None, name: str) -> Obj:
        if rt.scale is None:
            raise ApiError(404, "NotFound", f"{rt.plural} has no scale subresource")
        obj = self.get(rt, ns, name)
        meta = obj["metadata"]
        status: Obj = {"replicas": get_path(obj, rt.scale.status_replicas) or 0}
        if rt.scale.label_selector and get_path(obj, rt.scale.label_selector):
            status["selector"] = get_path(obj, rt.scale.label_selector)
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                k: meta[k]
                for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                if k in meta
            },
            "spec": {"replicas": get_path(obj, rt.scale.spec_replicas) or 0},
            "status": status,
        }

    def scale_write(self, rt: ResourceType, ns: str | None, name: str, ctype: str | None, body: Any) -> Obj:
        """PUT (``ctype`` None: ``body`` is a Scale) or PATCH the scale; only ``spec.replicas`` is
        written back, to the CRD's ``specReplicasPath``."""
        cur = self.scale_get(rt, ns, name)
        scale = body if ctype is None else self._patched(rt, cur, ctype, body)
        replicas = (scale.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise ApiError(422, "Invalid", f"spec.replicas: Invalid value: {replicas!r}")
        want_rv = (scale.get("metadata") or {}).get("resourceVersion")
        if ctype is not None and (body.get("metadata") or {}).get("resourceVersion") is None:
            want_rv = None
        old = self.get(rt, ns, name)
        new = copy.deepcopy(old)
        assert rt.scale is not None
        set_path(new, rt.scale.spec_replicas, replicas)
        new["metadata"]["resourceVersion"] = want_rv or old["metadata"]["resourceVersion"]
        self._commit(rt, old, new, None)
        return self.scale_get(rt, ns, name)

    # -- pods/log ---------------------------------------------------------------------------------

    def log_container(self, pod: Obj, container: str | None) -> str:
        """The container a log request means; 400 when a pod of several needs it named."""
        names = [c["name"] for c in pod["spec"].get("containers", [])]
        inits = [c["name"] for c in pod["spec"].get("initContainers") or []]
        if container is None:
            if len(names) != 1:
                raise ApiError(
                    400, "BadRequest",
                    f"a container name must be specified for pod {pod['metadata']['name']}, "
                    f"choose one of: {names}",
                )  # fmt: skip
            return names[0]
        if container not in names + inits:
            raise ApiError(
                400, "BadRequest", f"container {container} is not valid for pod {pod['metadata']['name']}"
            )
        return container

    def log_read(self, ns: str, pod_name: str, container: str | None, previous: bool) -> tuple[str, bytes]:
        """(container, the log of its current or previous run), with the real server's 400s."""
        pod = self.get(self.type("", "v1", "pods"), ns, pod_name)
        name = self.log_container(pod, container)
        st = container_status(pod, name)
        if previous:
            if not (st.get("lastState") or {}).get("terminated"):
                raise ApiError(
                    400, "BadRequest", f'previous terminated container "{name}" in pod "{pod_name}" not found'
                )
            return name, self.logs.get((ns, pod_name, name), [b"", b""])[1]
        state = st.get("state") or {}
        if not state.get("running") and not state.get("terminated"):
            why = (state.get("waiting") or {}).get("reason", "ContainerCreating")
            raise ApiError(
                400, "BadRequest", f'container "{name}" in pod "{pod_name}" is waiting to start: {why}'
            )
        return name, self.logs.get((ns, pod_name, name), [b"", b""])[0]

    def log_write(self, ns: str, pod: str, container: str, data: bytes, new_run: bool = False) -> None:
        """The kubelet side: append to the container's current log; ``new_run`` first moves the
        current log to ``previous`` (the container restarted)."""
        buf = self.logs.setdefault((ns, pod, container), [b"", b""])
        if new_run:
            buf[1], buf[0] = buf[0], b""
        buf[0] += data

    # -- the write pipeline -----------------------------------------------------------------------

    def bind(self, rt: ResourceType, ns: str | None, name: str, body: Obj) -> Obj:
        """``pods/binding``: what a scheduler does to put a pod on a node (once)."""
        old = self.get(rt, ns, name)
        node = (body.get("target") or {}).get("name")
        if old["spec"].get("nodeName"):
            raise ApiError(
                409, "Conflict", f'pod {name} is already assigned to node "{old["spec"]["nodeName"]}"'
            )
        if not node:
            raise ApiError(422, "Invalid", "target.name: Required value")
        new = copy.deepcopy(old)
        new["spec"]["nodeName"] = node
        return self._commit(rt, old, new, "binding")

    def _commit(self, rt: ResourceType, old: Obj, new: Obj, sub: str | None) -> Obj:
        """Store ``new`` in place of ``old`` (a main-resource, ``/status`` or ``/binding`` write)."""
        if sub == "status":
            merged = copy.deepcopy(old)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            merged["metadata"]["resourceVersion"] = new.get("metadata", {}).get("resourceVersion")
            new = merged
        elif "status" in rt.subresources:
            new.pop("status", None)
            if "status" in old:
                new["status"] = copy.deepcopy(old["status"])
        meta, ometa = new.setdefault("metadata", {}), old["metadata"]
        want = meta.get("resourceVersion")
        if want not in (None, "") and want != ometa["resourceVersion"]:
            raise ApiError(
                409, "Conflict",
                f'Operation cannot be fulfilled on {rt.plural} "{ometa["name"]}": the object has been '
                "modified; please apply your changes to the latest version and try again",
                {"name": ometa["name"], "group": rt.group, "kind": rt.plural},
            )  # fmt: skip
        for k in ("name", "namespace", "uid", "creationTimestamp", "generation", "deletionTimestamp"):
            if k in ometa:
                meta[k] = ometa[k]
            else:
                meta.pop(k, None)
        meta["resourceVersion"] = ometa["resourceVersion"]
        new["apiVersion"], new["kind"] = rt.api_version, rt.kind
        self._validate_meta(rt, meta)
        if ometa.get("deletionTimestamp") and set(meta.get("finalizers", [])) - set(
            ometa.get("finalizers", [])
        ):
            raise ApiError(422, "Forbidden", "no new finalizers can be added if the object is being deleted")
        new = self._defaults(rt, new, old, sub)
        meta = new["metadata"]
        if new == old:
            return new  # a no-op write: no new version, no event
        if _content(rt, new) != _content(rt, old):
            meta["generation"] = int(ometa.get("generation", 1)) + 1
        self._bump(new)
        key = self._key(rt, ometa.get("namespace"), ometa["name"])
        self.objects[key] = new
        self._emit(rt, "MODIFIED", new, old)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(key)
        return copy.deepcopy(new)

    def _defaults(self, rt: ResourceType, obj: Obj, old: Obj | None, sub: str | None) -> Obj:
        """Schema handling of custom resources; defaults and immutability of built-ins."""
        if rt.schema is not None:
            obj, pruned = apply_schema(rt.schema, obj)
            self.pruned.extend((f"{rt.kind}/{obj['metadata'].get('name')}", p) for p in pruned)
        if rt.kind == "Pod":
            _pod_defaults(obj, None if sub == "binding" else old)
        elif rt.kind == "Service":
            self._service_defaults(obj, old)
        elif rt.kind == "Namespace":
            obj.setdefault("status", {"phase": "Active"})
        elif rt.kind == "CustomResourceDefinition":
            _crd_defaults(obj)
        return obj

    def _service_defaults(self, svc: Obj, old: Obj | None) -> None:
        spec = svc.setdefault("spec", {})
        if old is not None:
            if spec.get("clusterIP") not in (None, old["spec"].get("clusterIP")):
                raise ApiError(422, "Invalid", "spec.clusterIP: Invalid value: field is immutable")
            spec["clusterIP"] = old["spec"].get("clusterIP")
        elif spec.get("clusterIP") != "None":
            spec["clusterIP"] = f"10.96.0.{next(self._ips)}"
        for p in spec.get("ports") or [{}]:
            if not isinstance(p.get("port"), int):
                raise ApiError(422, "Invalid", "spec.ports[].port: Required value")

    def _validate_meta(self, rt: ResourceType, meta: Obj) -> None:
        name = meta.get("name") or ""
        ok = _SUBDOMAIN.match(name) and len(name) <= 253
        if rt.kind in ("Namespace", "Service"):
            ok = _LABEL_NAME.match(name) and len(name) <= 63 and (rt.kind != "Service" or name[:1].isalpha())
        if not ok:
            raise ApiError(422, "Invalid", f'{rt.kind} "{name}" is invalid: metadata.name: Invalid value')
        for k, v in (meta.get("labels") or {}).items():
            if not isinstance(v, str) or len(v) > 63 or not _LABEL_VALUE.match(v):
                raise ApiError(422, "Invalid", f"metadata.labels: Invalid value: {v!r} (label {k})")
            if not _QUALIFIED.match(k.rsplit("/", 1)[-1]) or len(k.rsplit("/", 1)[-1]) > 63:
                raise ApiError(422, "Invalid", f"metadata.labels: Invalid value: key {k!r}")
        for k, v in (meta.get("annotations") or {}).items():
            if not isinstance(v, str):
                raise ApiError(400, "BadRequest", f"metadata.annotations.{k}: must be a string")

    def _bump(self, obj: Obj) -> None:
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)

    def _emit(self, rt: ResourceType, type_: str, obj: Obj, old: Obj | None = None) -> None:
        ev = Event(self.rv, rt.group, rt.plural, type_, copy.deepcopy(obj), old)
        self.events.append(ev)
        while len(self.events) > self.history:
            self.floor = self.events.popleft().rv
        for listener in list(self.listeners):
            listener.offer(ev)

    def _remove(self, key: Key, orphan: bool = False) -> Obj:
        obj = self.objects.pop(key)
        rt = next(t for t in self.types.values() if (t.group, t.plural) == key[:2])
        self.rv += 1
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = str(self.rv)
        self._emit(rt, "DELETED", gone)
        if rt.plural == "customresourcedefinitions":
            self._unregister_crd(obj)
        if rt.kind == "Pod":
            for k in [k for k in self.logs if k[:2] == (key[2], key[3])]:
                del self.logs[k]
        if not orphan:
            self._cascade(obj["metadata"]["uid"])
        return gone

    def _cascade(self, uid: str) -> None:
        """Garbage collection: dependents whose every owner is gone are deleted."""
        for key, obj in list(self.objects.items()):
            refs = obj["metadata"].get("ownerReferences") or []
            if key not in self.objects or not any(r.get("uid") == uid for r in refs):
                continue
            alive = [r for r in refs if r.get("uid") != uid and self._uid_exists(r.get("uid"))]
            rt = next(t for t in self.types.values() if (t.group, t.plural) == key[:2])
            if alive:
                new = copy.deepcopy(obj)
                new["metadata"]["ownerReferences"] = alive
                self._commit(rt, obj, new, None)
            else:
                self.delete(rt, key[2] or None, key[3], {"propagationPolicy": "Background"})

    def _uid_exists(self, uid: str | None) -> bool:
        return any(o["metadata"]["uid"] == uid for o in self.objects.values())


def container_status(pod: Obj, name: str) -> Obj:
    for st in [*(pod.get("status", {}).get("containerStatuses") or []),
               *(pod.get("status", {}).get("initContainerStatuses") or [])]:  # fmt: skip
        if st.get("name") == name:
            return dict(st)
    return {}


def _content(rt: ResourceType, obj: Obj) -> Obj:
    """What ``generation`` tracks: everything but metadata (and status, under a status subresource)."""
    skip = {"metadata", "apiVersion", "kind"} | ({"status"} if "status" in rt.subresources else set())
    return {k: v for k, v in obj.items() if k not in skip}


def _pod_defaults(pod: Obj, old: Obj | None) -> None:
    spec = pod.setdefault("spec", {})
    containers = spec.get("containers") or []
    if not containers or not all(c.get("name") and c.get("image") for c in containers):
        raise ApiError(422, "Invalid", "spec.containers: Required value (each with a name and an image)")
    names = [c["name"] for c in [*containers, *(spec.get("initContainers") or [])]]
    if len(set(names)) != len(names) or not all(_LABEL_NAME.match(n) for n in names):
        raise ApiError(422, "Invalid", f"spec.containers[].name: Invalid value: {names}")
    if spec.setdefault("restartPolicy", "Always") not in ("Always", "OnFailure", "Never"):
        raise ApiError(422, "Invalid", f"spec.restartPolicy: Unsupported value: {spec['restartPolicy']!r}")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("schedulerName", "default-scheduler")
    if old is None:
        pod.setdefault("status", {}).setdefault("phase", "Pending")
        return  # created, or bound to a node
    frozen = copy.deepcopy(spec)
    before = copy.deepcopy(old.get("spec", {}))
    for s in (frozen, before):
        for c in s.get("containers", []):
            c.pop("image", None)
        s.pop("activeDeadlineSeconds", None)
    if frozen != before:
        raise ApiError(
            422, "Invalid",
            "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
            "`spec.activeDeadlineSeconds` or `spec.tolerations` (only additions to existing tolerations)",
        )  # fmt: skip


def _crd_defaults(crd: Obj) -> None:
    spec, meta = crd.get("spec", {}), crd["metadata"]
    names = spec.get("names", {})
    if not spec.get("group") or not names.get("plural") or not names.get("kind") or not spec.get("versions"):
        raise ApiError(422, "Invalid", "spec: group, names.plural, names.kind and versions are required")
    if meta["name"] != f"{names['plural']}.{spec['group']}":
        raise ApiError(422, "Invalid", "metadata.name: must be spec.names.plural+'.'+spec.group")
    if sum(1 for v in spec["versions"] if v.get("storage")) != 1:
        raise ApiError(422, "Invalid", "spec.versions: exactly one version must be the storage version")
    for v in spec["versions"]:
        if not ((v.get("schema") or {}).get("openAPIV3Schema") or {}).get("type") == "object":
            raise ApiError(422, "Invalid", f"spec.versions[{v.get('name')}].schema.openAPIV3Schema: Required")
    crd["status"] = {
        "acceptedNames": names,
        "storedVersions": [v["name"] for v in spec["versions"] if v.get("storage")],
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"},
        ],
    }
