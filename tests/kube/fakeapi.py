"""A strict fake Kubernetes API server for tests: real HTTP on 127.0.0.1, its own thread and loop.

    kubernetes client / kopf ──HTTP──▶ aiohttp (thread "fake-kube") ──▶ Store (fakestore.py)
    test code ──FakeKube.call(fn)───────────────────────────────────▶ same loop (no locks needed)

It follows the idea of PyPI ``kmock``'s ``KubernetesEmulator`` (objects in memory over real HTTP,
served to the unmodified clients) but closes its gaps, which the contract tests depend on: uid /
resourceVersion / generation / creationTimestamp, 201 on create, 409 on a stale resourceVersion
(nothing changed), 410 on an expired watch, label and field selectors, PUT, separate ``/status``
and ``/scale`` subresources, finalizers, ownerReference garbage collection, generateName, list
``kind`` and pagination, discovery that follows the CRDs, ``pods/log`` (previous, follow, tail) and
``pods/binding``. Scripted one-shot errors (``fail_next``) answer before any state changes.

Every request loop is bounded: a watch ends after ``timeoutSeconds`` (at most ``max_stream_s``), a
log follow when its container ends, the pod goes, or ``max_stream_s`` passes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from aiohttp import web

from tests.kube.fakepatch import ApiError, LabelSelector, field_matches
from tests.kube.fakestore import Event, Listener, ResourceType, Store, container_status

__all__ = ["FakeKube"]

T = TypeVar("T")
Obj = dict[str, Any]
_EXPIRE, _CLOSE = "expire", "close"


@dataclass
class _Fault:
    method: str
    path: re.Pattern[str]
    status: int
    reason: str
    times: int
    agent: str


@dataclass(frozen=True)
class _Target:
    rt: ResourceType
    namespace: str | None
    name: str | None
    sub: str | None


class FakeKube:
    """``with FakeKube() as kube:`` serves at ``kube.url`` until the block ends."""

    def __init__(self, *, history: int = 1000, max_stream_s: float = 60.0) -> None:
        self.store = Store(history=history)
        self.max_stream_s = max_stream_s
        self.requests: deque[tuple[str, str]] = deque(maxlen=20000)
        #: every error answer: (method, path, status, message)
        self.errors: deque[tuple[str, str, int, str]] = deque(maxlen=2000)
        self.url = ""
        self._faults: list[_Fault] = []
        self._streams: set[asyncio.Queue[tuple[str, Obj] | str]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fake-kube", daemon=True)
        self._runner: web.AppRunner | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> FakeKube:
        self._thread.start()
        self.url = asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(10)
        return self

    def close(self) -> None:
        if self._runner is not None:
            self.call(lambda: [q.put_nowait(_CLOSE) for q in self._streams])
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
            self._runner = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> FakeKube:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def _serve(self) -> str:
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=1.0, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    # -- test helpers (any thread) --------------------------------------------------------------

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the server's loop (where the store lives) and return its result."""

        async def run() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    def fail_next(
        self, method: str, path: str, status: int = 409, *, times: int = 1, agent: str = ""
    ) -> None:
        """The next ``times`` requests ``METHOD`` whose path matches the regex ``path`` (and whose
        User-Agent contains ``agent``) fail with ``status`` before touching any state."""
        reason = {409: "Conflict", 410: "Gone", 500: "InternalError", 503: "ServiceUnavailable"}
        fault = _Fault(method.upper(), re.compile(path), status, reason.get(status, "Error"), times, agent)
        self.call(lambda: self._faults.append(fault))

    def expire_watches(self) -> None:
        """As when the API server's watch cache is compacted: every open watch ends with an ERROR
        410 event and a resume from any earlier resourceVersion gets 410."""

        def run() -> None:
            self.store.compact()
            for q in self._streams:
                q.put_nowait(_EXPIRE)

        self.call(run)

    def get(self, plural: str, name: str, namespace: str | None = None, group: str = "") -> Obj:
        rt = self._type_by_plural(group, plural)
        return self.call(lambda: self.store.get(rt, namespace, name))

    def list(self, plural: str, namespace: str | None = None, group: str = "", labels: str = "") -> list[Obj]:
        rt = self._type_by_plural(group, plural)
        items: list[Obj] = self.call(lambda: self.store.list(rt, namespace, labels, None))["items"]
        return items

    def add_node(
        self, name: str, *, cpu: str = "4", memory: str = "8Gi", gpu: int = 0, **labels: str
    ) -> None:
        alloc = {"cpu": cpu, "memory": memory, "pods": "110"}
        if gpu:
            alloc["nvidia.com/gpu"] = str(gpu)
        body = {
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
            "status": {"capacity": dict(alloc), "allocatable": alloc,
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }  # fmt: skip
        rt = self._type_by_plural("", "nodes")
        self.call(lambda: self.store.create(rt, None, body))

    def write_log(
        self, namespace: str, pod: str, text: str, *, container: str | None = None, new_run: bool = False
    ) -> None:
        """What the kubelet would collect from the container's stdout (``new_run``: it restarted)."""

        def run() -> None:
            obj = self.store.get(self._type_by_plural("", "pods"), namespace, pod)
            name = self.store.log_container(obj, container)
            self.store.log_write(namespace, pod, name, text.encode(), new_run)

        self.call(run)

    def kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        """A kubeconfig file that points the real clients at this server."""
        cfg = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "fake-token"}}],
            "contexts": [
                {"name": "fake", "context": {"cluster": "fake", "user": "fake", "namespace": namespace}}
            ],
            "current-context": "fake",
        }  # fmt: skip
        path.write_text(json.dumps(cfg))
        return path

    def _type_by_plural(self, group: str, plural: str) -> ResourceType:
        for rt in list(self.store.types.values()):
            if (rt.group, rt.plural) == (group, plural):
                return rt
        raise KeyError(f"{plural}.{group} is not served")

    # -- HTTP -----------------------------------------------------------------------------------

    async def _handle(self, req: web.Request) -> web.StreamResponse:
        self.requests.append((req.method, req.path_qs))
        try:
            self._check_fault(req)
            found = self._discovery(req.path)
            if found is not None:
                return web.json_response(found)
            return await self._dispatch(req, self._parse(req.path))
        except ApiError as exc:
            self.errors.append((req.method, req.path, exc.status, exc.message))
            return web.json_response(exc.body(), status=exc.status)

    def _check_fault(self, req: web.Request) -> None:
        for f in self._faults:
            agent = f.agent in req.headers.get("User-Agent", "")
            if f.method == req.method and f.path.search(req.path) and f.times > 0 and agent:
                f.times -= 1
                raise ApiError(f.status, f.reason, f"scripted failure of {req.method} {req.path}")

    def _parse(self, path: str) -> _Target:
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["api"] and len(parts) >= 3:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[:1] == ["apis"] and len(parts) >= 4:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        ns = None
        if rest[0] == "namespaces" and len(rest) >= 3 and (group, version, rest[2]) in self.store.types:
            ns, rest = rest[1], rest[2:]
        rt = self.store.type(group, version, rest[0])
        name = rest[1] if len(rest) > 1 else None
        sub = "/".join(rest[2:]) or None
        if sub is not None and sub not in rt.subresources:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
        return _Target(rt, ns, name, sub)

    async def _dispatch(self, req: web.Request, t: _Target) -> web.StreamResponse:
        q, m, s = req.query, req.method, self.store
        if q.get("dryRun"):
            raise ApiError(400, "BadRequest", "dryRun is not emulated by the fake API server")
        if m == "GET" and q.get("watch") in ("true", "1"):
            return await self._watch(req, t)
        if m == "GET" and t.sub == "log":
            return await self._log(req, t)
        if m == "GET":
            if t.name is None:
                return web.json_response(self._list(t, q))
            if t.sub == "scale":
                return web.json_response(s.scale_get(t.rt, t.namespace, t.name))
            return web.json_response(s.get(t.rt, t.namespace, t.name))
        body = await self._body(req)
        if m == "POST" and t.name is None:
            return web.json_response(s.create(t.rt, t.namespace, body), status=201)
        if m == "POST" and t.sub == "binding":
            s.bind(t.rt, t.namespace, str(t.name), body)
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Success"}, status=201)
        if m == "DELETE" and t.name is None:
            return web.json_response(self._delete_collection(t, q, body))
        if t.name is None:
            raise ApiError(405, "MethodNotAllowed", f"{m} is not allowed on a collection")
        if m == "DELETE":
            return web.json_response(s.delete(t.rt, t.namespace, t.name, body))
        ctype = None if m == "PUT" else req.headers.get("Content-Type", "")
        if m not in ("PUT", "PATCH"):
            raise ApiError(405, "MethodNotAllowed", f"{m} is not supported")
        if t.sub == "scale":
            return web.json_response(s.scale_write(t.rt, t.namespace, t.name, ctype, body))
        if ctype is None:
            return web.json_response(s.replace(t.rt, t.namespace, t.name, body, t.sub))
        return web.json_response(s.patch(t.rt, t.namespace, t.name, ctype, body, t.sub))

    @staticmethod
    async def _body(req: web.Request) -> Any:
        raw = await req.read()
        if not raw:
            return {}
        if "yaml" in req.headers.get("Content-Type", ""):
            raise ApiError(415, "UnsupportedMediaType", "server-side apply is not emulated")
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise ApiError(400, "BadRequest", f"the request body is not JSON: {exc}") from None

    def _list(self, t: _Target, q: Any) -> Obj:
        out = self.store.list(t.rt, t.namespace, q.get("labelSelector"), q.get("fieldSelector"))
        start = int(q.get("continue") or 0)
        limit = int(q.get("limit") or 0)
        if limit:
            items = out["items"]
            out["items"] = items[start : start + limit]
            out["metadata"]["continue"] = str(start + limit) if start + limit < len(items) else ""
        return out

    def _delete_collection(self, t: _Target, q: Any, body: Any) -> Obj:
        found = self.store.list(t.rt, t.namespace, q.get("labelSelector"), q.get("fieldSelector"))
        for obj in found["items"]:
            meta = obj["metadata"]
            with contextlib.suppress(ApiError):
                self.store.delete(t.rt, meta.get("namespace"), meta["name"], body)
        return found

    # -- watch ----------------------------------------------------------------------------------

    async def _watch(self, req: web.Request, t: _Target) -> web.StreamResponse:
        q = req.query
        fields = ",".join(filter(None, [q.get("fieldSelector"), t.name and f"metadata.name={t.name}"]))
        queue: asyncio.Queue[tuple[str, Obj] | str] = asyncio.Queue()
        listener = Listener(
            t.rt.group, t.rt.plural, t.namespace, LabelSelector.parse(q.get("labelSelector")),
            fields or None, lambda kind, obj: queue.put_nowait((kind, obj)),
        )  # fmt: skip
        field_matches({}, listener.fields)  # a bad selector answers 400 before streaming
        error: ApiError | None = None
        rv = q.get("resourceVersion")
        try:  # what came before this watch, queued before the listener sees live events (one loop)
            if rv in (None, "", "0") or q.get("sendInitialEvents") == "true":
                for obj in self.store.list(t.rt, t.namespace, None, None)["items"]:
                    listener.offer(Event(0, t.rt.group, t.rt.plural, "ADDED", obj))
            else:
                for ev in self.store.since(t.rt, int(rv)):
                    listener.offer(ev)
        except ApiError as exc:
            error = exc
        self.store.listeners.append(listener)
        self._streams.add(queue)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        try:
            await resp.prepare(req)
            if error is not None:
                await self._send(resp, "ERROR", error.body())
            else:
                await self._pump(resp, queue, q)
            await resp.write_eof()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.store.listeners.remove(listener)
            self._streams.discard(queue)
        return resp

    async def _pump(self, resp: web.StreamResponse, queue: asyncio.Queue[Any], q: Any) -> None:
        timeout = min(float(q.get("timeoutSeconds") or self.max_stream_s), self.max_stream_s)
        deadline = asyncio.get_running_loop().time() + timeout
        while (left := deadline - asyncio.get_running_loop().time()) > 0:
            try:
                item = await asyncio.wait_for(queue.get(), left)
            except TimeoutError:
                break
            if item == _CLOSE:
                return
            if item == _EXPIRE:
                gone = ApiError(410, "Expired", "too old resource version (the watch cache was compacted)")
                await self._send(resp, "ERROR", gone.body())
                return
            await self._send(resp, *item)
        if q.get("allowWatchBookmarks") == "true":
            await self._send(resp, "BOOKMARK", {"metadata": {"resourceVersion": str(self.store.rv)}})

    @staticmethod
    async def _send(resp: web.StreamResponse, kind: str, obj: Obj) -> None:
        await resp.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

    # -- pods/log -------------------------------------------------------------------------------

    async def _log(self, req: web.Request, t: _Target) -> web.StreamResponse:
        q = req.query
        ns, pod = t.namespace or "", str(t.name)
        container, data = self.store.log_read(ns, pod, q.get("container"), q.get("previous") == "true")
        if q.get("tailLines"):
            lines = data.splitlines(keepends=True)
            data = b"".join(lines[-int(q["tailLines"]) :]) if int(q["tailLines"]) else b""
        if q.get("follow") != "true":
            return web.Response(body=data, content_type="text/plain")
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(req)
        sent = len(self.store.logs.get((ns, pod, container), [b""])[0]) if not q.get("tailLines") else -1
        await resp.write(data)
        await self._follow(resp, ns, pod, container, sent)
        with contextlib.suppress(ConnectionError):
            await resp.write_eof()
        return resp

    async def _follow(self, resp: web.StreamResponse, ns: str, pod: str, container: str, sent: int) -> None:
        """Stream what the container writes until it terminates, the pod goes, or the time is up."""
        if sent < 0:
            sent = len(self.store.logs.get((ns, pod, container), [b""])[0])
        deadline = asyncio.get_running_loop().time() + self.max_stream_s
        while asyncio.get_running_loop().time() < deadline:
            buf = self.store.logs.get((ns, pod, container), [b"", b""])[0]
            if len(buf) > sent:
                try:
                    await resp.write(buf[sent:])
                except ConnectionError:
                    return
                sent = len(buf)
            obj = self.store.objects.get(("", "pods", ns, pod))
            if obj is None or (container_status(obj, container).get("state") or {}).get("terminated"):
                return
            await asyncio.sleep(0.05)

    # -- discovery ------------------------------------------------------------------------------

    def _discovery(self, path: str) -> Obj | None:
        path = path.rstrip("/") or "/"
        types = list(self.store.types.values())
        groups: dict[str, list[str]] = {}
        for rt in types:
            if rt.group and rt.version not in groups.setdefault(rt.group, []):
                groups[rt.group].append(rt.version)
        if path == "/version":
            return {
                "major": "1",
                "minor": "31",
                "gitVersion": "v1.31.0-fake",
                "gitCommit": "fake",
                "gitTreeState": "clean",
                "buildDate": "2026-01-01T00:00:00Z",
                "goVersion": "go1.23",
                "compiler": "gc",
                "platform": "linux/amd64",
            }
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
        if path == "/apis":
            return {
                "kind": "APIGroupList",
                "apiVersion": "v1",
                "groups": [_group(g, v) for g, v in groups.items()],
            }
        m = re.fullmatch(r"/apis/([^/]+)", path)
        if m and m.group(1) in groups:
            return {"kind": "APIGroup", "apiVersion": "v1", **_group(m.group(1), groups[m.group(1)])}
        m = re.fullmatch(r"/api/(v1)|/apis/([^/]+)/([^/]+)", path)
        if m:
            group, version = ("", "v1") if m.group(1) else (m.group(2), m.group(3))
            served = [rt for rt in types if (rt.group, rt.version) == (group, version)]
            if not served:
                raise ApiError(404, "NotFound", f"the server could not find the requested resource ({path})")
            gv = f"{group}/{version}" if group else version
            return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv,
                    "resources": [r for rt in served for r in _resources(rt)]}  # fmt: skip
        return None


def _group(name: str, versions: list[str]) -> Obj:
    vs = [{"groupVersion": f"{name}/{v}", "version": v} for v in versions]
    return {"name": name, "versions": vs, "preferredVersion": vs[0]}


def _resources(rt: ResourceType) -> list[Obj]:
    verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
    main = {
        "name": rt.plural, "singularName": rt.singular, "namespaced": rt.namespaced, "kind": rt.kind,
        "verbs": verbs, "shortNames": list(rt.short_names), "categories": list(rt.categories),
    }  # fmt: skip
    subs = [
        {"name": f"{rt.plural}/{sub}", "singularName": "", "namespaced": rt.namespaced,
         "kind": "Scale" if sub == "scale" else rt.kind, "verbs": ["get", "patch", "update"]}
        for sub in sorted(rt.subresources)
    ]  # fmt: skip
    return [main, *subs]
