"""Talking to a Kubernetes API server: one configured client, plain-dict calls, bounded retries.

    connect(kubeconfig | None) ──▶ Kube: ApiClient + CoreV1Api + NetworkingV1Api + CustomObjectsApi
                                   (+ the URL)
    kube.call(api.method, *args) ──▶ the JSON the server answered, as a dict (no model classes)
    retry_conflict(fn)            ──▶ run a read-modify-write again on 409 Conflict (bounded)

Shared by the server's backend, the operator and the EDL controller. Every call carries a time
limit. ``kubernetes`` is imported here, lazily by the callers (the optional extra ``kubernetes``).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kubernetes import client, config

from paddlecloud._version import __version__
from paddlecloud.backends.errors import BackendError, BackendUnavailable, JobRejected
from paddlecloud.backends.kubernetes import crd

__all__ = ["Kube", "api_message", "api_status", "backend_error", "connect", "retry_conflict"]

log = logging.getLogger("paddlecloud.kubernetes")

T = TypeVar("T")
Obj = dict[str, Any]

#: how long a streamed response (a followed log) may stay silent
STREAM_READ_TIMEOUT_S = 3600.0
#: attempts of a read-modify-write that keeps meeting 409 Conflict
CONFLICT_ATTEMPTS = 5


def api_status(exc: BaseException) -> int | None:
    """The HTTP status of a failed API call, or None when it was not an answer from the server."""
    return int(exc.status) if isinstance(exc, client.ApiException) and exc.status else None


def backend_error(exc: BaseException, what: str) -> BackendError:
    """A failed API call as the backend contract's error: no answer, a timeout, 429 or a 5xx is
    transient (``BackendUnavailable``: the server is tried again next cycle); any other answer is the
    cluster refusing the job (``JobRejected``: 400 invalid, 403 forbidden or over a ResourceQuota,
    422 ...), with what the API server said."""
    status = api_status(exc)
    message = f"{what}: {api_message(exc)}"
    if status is None or status in (408, 429) or status >= 500:
        return BackendUnavailable(message)
    return JobRejected(message)


def api_message(exc: BaseException) -> str:
    """What the API server said (its Status message), else the error itself, in one line."""
    if isinstance(exc, client.ApiException):
        try:
            body = json.loads(exc.body or "")
            return f"{body.get('reason') or exc.reason} ({exc.status}): {body.get('message')}"
        except (ValueError, AttributeError):
            return f"{exc.reason} ({exc.status})"
    return f"{type(exc).__name__}: {exc}"


@dataclass
class Kube:
    api: client.ApiClient
    timeout_s: float = 10.0

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self.networking = client.NetworkingV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    @property
    def url(self) -> str:
        return str(self.api.configuration.host)

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Obj:
        """``fn(*args, **kwargs)`` without model deserialisation: the answer's JSON (``{}`` if none)."""
        kwargs.setdefault("_request_timeout", self.timeout_s)
        resp = fn(*args, _preload_content=False, **kwargs)
        data = resp.data
        out: Obj = json.loads(data) if data else {}
        return out

    def quietly(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """A write whose object may be gone already (404 is fine)."""
        try:
            self.call(fn, *args, **kwargs)
        except client.ApiException as exc:
            if api_status(exc) != 404:
                raise

    def stream(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """The raw streaming response of ``fn`` (pods/log with follow): a connect timeout, and a
        long read timeout (a quiet worker is not an error)."""
        kwargs.setdefault("_request_timeout", (self.timeout_s, STREAM_READ_TIMEOUT_S))
        return fn(*args, _preload_content=False, **kwargs)

    # -- TrainingJobs -----------------------------------------------------------------------------

    def get_job(self, ns: str, name: str) -> Obj:
        return self.call(
            self.custom.get_namespaced_custom_object, crd.GROUP, crd.VERSION, ns, crd.PLURAL, name
        )

    def list_jobs(self, ns: str | None = None) -> list[Obj]:
        g, v, p = crd.GROUP, crd.VERSION, crd.PLURAL
        if ns is None:
            out = self.call(self.custom.list_cluster_custom_object, g, v, p)
        else:
            out = self.call(self.custom.list_namespaced_custom_object, g, v, ns, p)
        return list(out.get("items") or [])

    def get_scale(self, ns: str, name: str) -> Obj:
        g, v, p = crd.GROUP, crd.VERSION, crd.PLURAL
        return self.call(self.custom.get_namespaced_custom_object_scale, g, v, ns, p, name)

    def patch_scale(self, ns: str, name: str, body: Obj) -> Obj:
        g, v, p = crd.GROUP, crd.VERSION, crd.PLURAL
        return self.call(self.custom.patch_namespaced_custom_object_scale, g, v, ns, p, name, body)

    def post_event(self, job: Obj, type_: str, reason: str, message: str, now: str, component: str) -> None:
        """A core/v1 Event about TrainingJob ``job`` (what ``kubectl describe tj`` shows); a failure
        to post one is logged, never raised (events are for people)."""
        meta = job["metadata"]
        body = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": crd.API_VERSION, "kind": crd.KIND, "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta["uid"]},
            "type": type_, "reason": reason, "message": message[:1024], "source": {"component": component},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }  # fmt: skip
        try:
            self.call(self.core.create_namespaced_event, meta["namespace"], body)
        except client.ApiException as exc:
            log.warning("posting event %s on %s/%s failed: %s", reason, meta["namespace"], meta["name"], exc)

    def list_pods(self, ns: str | None, selector: str = "") -> list[Obj]:
        if ns is None:
            out = self.call(self.core.list_pod_for_all_namespaces, label_selector=selector)
        else:
            out = self.call(self.core.list_namespaced_pod, ns, label_selector=selector)
        return list(out.get("items") or [])


def connect(kubeconfig: str | None, timeout_s: float = 10.0, agent: str = "paddlecloud") -> Kube:
    """A client from a kubeconfig file, or from the pod's service account when ``kubeconfig`` is
    None (in-cluster). ``agent``: the User-Agent, which names the caller in the API server's logs."""
    if kubeconfig:
        api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    else:
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        api = client.ApiClient(cfg)
    api.user_agent = f"{agent}/{__version__}"
    return Kube(api, timeout_s)


def retry_conflict(fn: Callable[[], T], attempts: int = CONFLICT_ATTEMPTS, pause_s: float = 0.05) -> T:
    """Run ``fn`` (which reads, then writes with the resourceVersion it read) until it does not meet
    409 Conflict, at most ``attempts`` times; the last 409 is raised."""
    for attempt in range(attempts):
        try:
            return fn()
        except client.ApiException as exc:
            if api_status(exc) != 409 or attempt == attempts - 1:
                raise
            time.sleep(pause_s * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover
