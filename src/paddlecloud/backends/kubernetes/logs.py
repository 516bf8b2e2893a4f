"""Worker logs from the Kubernetes API (``pods/log``) as the backend contract's byte stream.

    LogRequest ──▶ one reader per worker: pod <tj>-<worker>, container "worker"
                   ("prepare": the fetch and install init containers of the job's first pod)
        tail / previous: one GET each;  follow: a streaming GET per run of the worker, moving on to
        the pod of the worker's next run when the operator restarted it
    readers ──queue──▶ lines, "[worker] "-prefixed when several workers are read

``previous``: restarts re-create a worker's pod, so the kubelet keeps no earlier run of it; the
run before the current one is the container's previous log when the kubelet restarted it in place,
else the tail the TrainingJob keeps of its last failure (``status.lastFailure``). Every loop is
bounded: a follow waits at most ``wait_s`` for a pod to start and follows at most ``max_runs`` runs.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from paddlecloud.backends.base import LogRequest
from paddlecloud.backends.kubernetes import crd
from paddlecloud.backends.kubernetes.kube import Kube, api_status
from paddlecloud.backends.kubernetes.pods import RENDEZVOUS, pod_name

__all__ = ["LogSource", "read_logs"]

_POLL_S = 0.5
_DONE = object()


@dataclass
class LogSource:
    """Where a job's pods are, and how to read its TrainingJob (for ``previous``)."""

    kube: Kube
    namespace: str
    job: str  # the TrainingJob's name
    wait_s: float = 600.0
    max_runs: int = 100
    stop: threading.Event = field(default_factory=threading.Event)

    def pod(self, worker: str) -> str:
        role, _, index = worker.rpartition("-")
        return pod_name(self.job, role, int(index)) if role and index.isdigit() else f"{self.job}-{worker}"

    def read(self, pod: str, container: str, **params: Any) -> bytes:
        try:
            resp = self.kube.stream(self.kube.core.read_namespaced_pod_log, pod, self.namespace,
                                    container=container, **params)  # fmt: skip
            return bytes(resp.data)
        except client.ApiException as exc:
            if api_status(exc) in (400, 404):  # not started yet, or gone: nothing to show
                return b""
            raise

    def run_of(self, pod: str) -> int | None:
        return self.state(pod)[0]

    def state(self, pod: str) -> tuple[int | None, str]:
        """The pod's run and phase; ``(None, "")`` when there is no such pod."""
        try:
            obj = self.kube.call(self.kube.core.read_namespaced_pod, pod, self.namespace)
        except client.ApiException as exc:
            if api_status(exc) == 404:
                return None, ""
            raise
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return int(labels.get(crd.LABEL_RUN, 0)), str((obj.get("status") or {}).get("phase") or "")


def _lines(data: bytes, worker: str, many: bool) -> Iterator[bytes]:
    if not data:
        return
    for line in data.splitlines(keepends=True):
        if not line.endswith(b"\n"):
            line += b"\n"
        yield (f"[{worker}] ".encode() + line) if many else line


def _first_pod(src: LogSource, workers: tuple[str, ...]) -> str:
    for w in ("pserver-0", f"{RENDEZVOUS}-0", "trainer-0", *workers):
        if src.run_of(src.pod(w)) is not None:
            return src.pod(w)
    return src.pod("trainer-0")


def _previous(src: LogSource, worker: str, tail: int | None) -> bytes:
    pod = src.pod(worker)
    params: dict[str, Any] = {"previous": True}
    if tail is not None:
        params["tail_lines"] = tail
    data = src.read(pod, "worker", **params)
    if data:
        return data
    try:
        job = src.kube.get_job(src.namespace, src.job)
    except client.ApiException:
        return b""
    last: Mapping[str, Any] = (job.get("status") or {}).get("lastFailure") or {}
    run = src.run_of(pod)
    if last.get("worker") != worker or run is None or int(last.get("run", -1)) != run - 1:
        return b""
    text = str(last.get("message") or "")
    lines = text.splitlines()[-tail:] if tail else text.splitlines()
    return ("\n".join(lines) + "\n").encode() if lines else b""


def _once(src: LogSource, worker: str, req: LogRequest) -> bytes:
    if worker == "prepare":
        pod = _first_pod(src, req.workers)
        return b"".join(src.read(pod, c) for c in ("fetch", "install"))
    if req.previous:
        return _previous(src, worker, req.tail)
    params = {"tail_lines": req.tail} if req.tail is not None else {}
    return src.read(src.pod(worker), "worker", **params)


def _follow_run(src: LogSource, pod: str, tail: int | None, put: Callable[[bytes], None]) -> bool:
    """Stream one run's log; False when it never started within ``wait_s`` (or the pod went)."""
    deadline = time.monotonic() + src.wait_s
    params: dict[str, Any] = {"follow": True, "container": "worker"}
    if tail is not None:
        params["tail_lines"] = tail
    while not src.stop.is_set():
        try:
            resp = src.kube.stream(src.kube.core.read_namespaced_pod_log, pod, src.namespace, **params)
        except client.ApiException as exc:
            if api_status(exc) != 400 or time.monotonic() > deadline:  # 400: not started yet
                return False
            time.sleep(_POLL_S)
            continue
        try:
            for chunk in resp.stream(64 * 1024):
                put(chunk)
                if src.stop.is_set():
                    break
        finally:
            resp.release_conn()
        return True
    return False


def _follow(src: LogSource, worker: str, req: LogRequest, put: Callable[[bytes], None]) -> None:
    """Follow ``worker`` through its runs: when a run failed and the job goes on, the pod of the
    worker's next run (the operator restarts it) is followed too."""
    pod, tail = src.pod(worker), req.tail
    run = src.run_of(pod)
    for _ in range(src.max_runs):
        if run is None or not _follow_run(src, pod, tail, put):
            return
        tail = None
        run = _next_run(src, pod, run)


def _next_run(src: LogSource, pod: str, run: int) -> int | None:
    """The worker's next run once its pod is re-created; None when there will be none (it
    succeeded, or the job ended) or none came within ``wait_s``."""
    deadline = time.monotonic() + src.wait_s
    while not src.stop.is_set() and time.monotonic() < deadline:
        nxt, phase = src.state(pod)
        if nxt is not None and nxt != run:
            return nxt
        if phase in ("Succeeded", "Running") or not _may_restart(src):
            return None  # it ended well (or the stream ended early), or nothing will restart it
        time.sleep(_POLL_S)
    return None


def _may_restart(src: LogSource) -> bool:
    """The job is still going (a finished or deleted job re-creates no pod)."""
    try:
        job = src.kube.get_job(src.namespace, src.job)
    except client.ApiException:
        return False
    phase = (job.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not (job.get("metadata") or {}).get("deletionTimestamp")


def read_logs(src: LogSource, req: LogRequest) -> Iterator[bytes]:
    many = len(req.workers) > 1
    if not req.follow or req.previous:
        for w in req.workers:
            yield from _lines(_once(src, w, req), w, many)
        return
    q: queue.Queue[object] = queue.Queue(maxsize=1024)

    def reader(worker: str) -> None:
        partial = b""

        def put(chunk: bytes) -> None:
            nonlocal partial
            *done, partial = (partial + chunk).split(b"\n")
            for line in done:
                q.put((f"[{worker}] ".encode() if many else b"") + line + b"\n")

        try:
            if worker == "prepare":
                put(_once(src, worker, req))
            else:
                _follow(src, worker, req, put)
            if partial:
                put(b"\n")
        finally:
            q.put(_DONE)

    threads = [threading.Thread(target=reader, args=(w,), daemon=True, name=f"log-{w}") for w in req.workers]
    for t in threads:
        t.start()
    try:
        left = len(threads)
        while left:
            item = q.get()
            if item is _DONE:
                left -= 1
            else:
                assert isinstance(item, bytes)
                yield item
    finally:
        src.stop.set()
