"""Read a job's data through its task master, inside a worker. Standard library only (urllib).

    for task in paddlecloud.runtime.tasks():      # leases tasks until every pass is over
        train_on(task.local_path)                  # or task.read() / task.lines() for byte ranges
        # leaving the loop body acknowledges the task done

    trainer ──POST …/tasks/lease {lease: random id}──▶ server: a task, or "wait", or "finished"
            ──POST …/tasks/{i}/renew (a thread, every lease/3 s while the task is held)
            ──POST …/tasks/{i}/done | fail

The job's token and the server's URL come from the env contract (``PADDLECLOUD_JOB_TOKEN``,
``PADDLECLOUD_API``; an https URL is verified with ``PADDLECLOUD_API_CA`` when the server set one,
else with the system's trusted CAs); the job must have been submitted with tasks (``--tasks-from-input`` or
``--task``). A trainer that dies holding a task loses nothing: its lease expires (no renewals)
and another trainer gets the task. Every request is retried with backoff on connection errors and
502/503/504 for up to ``retry_for`` seconds (a server restart); each is idempotent (the lease id is
the trainer's own), so a retried request never counts twice. An exception (or ``break``) out of
the loop body reports the task failed: it is handed out again, up to the job's failure limit.
Explicit: ``with task: ...`` acknowledges on success and reports the failure on an exception;
``task.done()`` returns False (and warns) when the lease was lost to another trainer.
"""

from __future__ import annotations

import json
import os
import secrets
import ssl
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.client import HTTPException
from types import TracebackType
from typing import Any

from paddlecloud.runtime import apiclient
from paddlecloud.runtime import contract as c

__all__ = ["LeaseLost", "Task", "TaskMaster", "TaskMasterError", "tasks"]

_RETRY_STATUS = frozenset({502, 503, 504})
_CHUNK = 1 << 20


class TaskMasterError(RuntimeError):
    """The task master refused a request (``code`` is the API's stable error code) or is unreachable."""

    def __init__(self, message: str, code: str = "", status: int = 0) -> None:
        super().__init__(message)
        self.code, self.status = code, status


class LeaseLost(TaskMasterError):
    """The task was handed to another trainer (our lease expired) or has ended."""


def _opener(ca: str) -> urllib.request.OpenerDirector:
    """Direct (never through a proxy), through the job's API socket when it has one; https verified
    with ``ca`` if given, else the system's CAs (``runtime.apiclient``)."""
    try:
        return apiclient.opener(ca)
    except (OSError, ssl.SSLError) as exc:
        raise TaskMasterError(f"cannot load the API's CA bundle {ca} ({c.API_CA}): {exc}") from None


def _warn(msg: str) -> None:
    print(f"paddlecloud.runtime.tasks: {msg}", file=sys.stderr, flush=True)


def _http_error(exc: urllib.error.HTTPError) -> TaskMasterError:
    try:
        err = json.loads(exc.read() or b"{}").get("error", {})
    except (ValueError, AttributeError, OSError):
        err = {}
    code, message = str(err.get("code", "")), str(err.get("message", f"HTTP {exc.code}"))
    cls = LeaseLost if code == "lease_lost" else TaskMasterError
    return cls(message, code=code, status=exc.code)


@dataclass
class Task:
    """One leased task. ``path`` is relative to the job's input (or an explicit item's text)."""

    index: int
    kind: str  # file | range | item
    path: str
    offset: int
    length: int | None
    pass_no: int
    num_passes: int
    lease: str
    lease_seconds: float
    input_dir: str = ""
    #: leased, then done, failed or lost
    state: str = "leased"
    master: TaskMaster | None = field(default=None, repr=False)
    #: when the background thread renews the lease next (time.monotonic)
    renew_at: float = field(default=0.0, repr=False)

    @property
    def local_path(self) -> str:
        """The file on this machine (file and range tasks)."""
        return os.path.join(self.input_dir, self.path) if self.path else self.input_dir

    def _m(self) -> TaskMaster:
        if self.master is None:
            raise TaskMasterError("this task has no task master")
        return self.master

    def done(self) -> bool:
        """Acknowledge the task done; False (with a warning) if another trainer has it now."""
        return self._m().done(self)

    def fail(self, error: str = "") -> None:
        """Give the task back: another trainer gets it, up to the job's failure limit."""
        self._m().fail(self, error)

    def renew(self) -> bool:
        """Extend the lease now (the task master also does it in the background)."""
        return self._m().renew(self)

    def read(self) -> bytes:
        """The task's bytes: the whole file, or its byte range."""
        with open(self.local_path, "rb") as f:
            f.seek(self.offset)
            return f.read() if self.length is None else f.read(self.length)

    def lines(self) -> Iterator[bytes]:
        """The lines of the task's data. For a byte range: every line that *starts* inside it (the
        last one read to its end), so consecutive ranges of a file yield each line exactly once."""
        end = None if self.kind != "range" or self.length is None else self.offset + self.length
        with open(self.local_path, "rb", buffering=_CHUNK) as f:
            pos = self.offset
            if pos > 0:
                f.seek(pos - 1)
                pos += len(f.readline()) - 1  # the rest of a line that started before us
            while end is None or pos < end:
                line = f.readline()
                if not line:
                    return
                pos += len(line)
                yield line

    def __enter__(self) -> Task:
        return self

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, _tb: TracebackType | None
    ) -> None:
        if self.state != "leased":
            return
        if exc is None:
            self.done()
        else:
            self.fail(f"{type(exc).__name__}: {exc}")


class TaskMaster:
    """A client of one job's task master (defaults from the env contract)."""

    def __init__(
        self,
        api: str | None = None,
        token: str | None = None,
        job: str | None = None,
        worker: str | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        timeout: float = 10.0,
        retry_for: float = 60.0,
        auto_renew: bool = True,
        ca: str | None = None,
    ) -> None:
        """``ca``: a CA bundle for an https ``api`` (default ``PADDLECLOUD_API_CA``, else the system's)."""
        e = os.environ if environ is None else environ
        self.api = (api or e.get(c.API, "")).rstrip("/")
        self.token = token or e.get(c.JOB_TOKEN, "")
        self.job = job or e.get(c.JOB_NAME, "")
        self.worker = worker if worker is not None else e.get(c.WORKER, "")
        #: this worker's run: when the platform sees it end, its leases are handed on at once
        self.run = int(e.get(c.RESTART, "0") or 0)
        self.input_dir = e.get(c.INPUT_DIR, "")
        if not (self.api and self.token and self.job):
            raise TaskMasterError(
                f"no task master: {c.API}, {c.JOB_TOKEN} and {c.JOB_NAME} must be set (inside a job "
                "submitted with --tasks-from-input or --task they are)"
            )
        self.timeout, self.retry_for, self.auto_renew = timeout, retry_for, auto_renew
        self._opener = _opener(ca if ca is not None else e.get(c.API_CA, ""))
        self._held: dict[int, Task] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._renewer: threading.Thread | None = None

    # -- plumbing ---------------------------------------------------------------------------------

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        url = f"{self.api}/api/v1/jobs/{self.job}/tasks{path}"
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        deadline, delay = time.monotonic() + self.retry_for, 0.1
        while True:
            req = urllib.request.Request(url, data=data, method=method, headers=headers)
            try:
                with self._opener.open(req, timeout=self.timeout) as r:
                    answer: dict[str, Any] = json.loads(r.read() or b"{}")
                    return answer
            except urllib.error.HTTPError as exc:
                if exc.code not in _RETRY_STATUS or time.monotonic() > deadline:
                    raise _http_error(exc) from None
                problem = f"HTTP {exc.code}"
            except (OSError, HTTPException) as exc:  # refused, reset, timed out (URLError is an OSError)
                if isinstance(getattr(exc, "reason", exc), ssl.SSLCertVerificationError):  # no retry mends it
                    raise TaskMasterError(
                        f"the task master at {self.api} presented a certificate that cannot be verified "
                        f"({exc}); {c.API_CA} names the CA bundle to trust"
                    ) from None
                if time.monotonic() > deadline:
                    raise TaskMasterError(f"cannot reach the task master at {self.api}: {exc}") from None
                problem = str(exc)
            _warn(f"{method} {path or '/'}: {problem}; retrying in {delay:.1f}s")
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    # -- operations -------------------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """``{"summary": {...}, "items": [...]}`` as in ``paddlecloud get tasks -o json``."""
        return self._call("GET", "")

    def lease(self) -> Task | None:
        """The next task (waiting while every remaining task of the pass is leased); None at the end."""
        lease_id = secrets.token_hex(16)  # ours: a retried request gets the same task back
        while True:
            r = self._call("POST", "/lease", {"lease": lease_id, "worker": self.worker, "run": self.run})
            if r["status"] == "finished":
                return None
            if r["status"] == "leased":
                t = r["task"]
                task = Task(
                    index=int(t["index"]), kind=str(t["kind"]), path=str(t["path"]), offset=int(t["offset"]),
                    length=None if t.get("length") is None else int(t["length"]), pass_no=int(r["pass_no"]),
                    num_passes=int(r["num_passes"]), lease=str(r["lease"]),
                    lease_seconds=float(r["lease_seconds"]), input_dir=self.input_dir, master=self,
                )  # fmt: skip
                self._hold(task)
                return task
            time.sleep(max(float(r.get("retry_after", 0.25)), 0.01))

    def done(self, task: Task) -> bool:
        try:
            self._call("POST", f"/{task.index}/done", {"lease": task.lease})
        except LeaseLost as exc:
            task.state = "lost"
            _warn(f"task {task.index} ({task.path}) not acknowledged: {exc}")
            return False
        finally:
            self._release(task)
        task.state = "done"
        return True

    def fail(self, task: Task, error: str = "") -> None:
        try:
            self._call("POST", f"/{task.index}/fail", {"lease": task.lease, "error": error[:4096]})
            task.state = "failed"
        except LeaseLost:
            task.state = "lost"
        finally:
            self._release(task)

    def renew(self, task: Task) -> bool:
        try:
            self._call("POST", f"/{task.index}/renew", {"lease": task.lease})
            return True
        except LeaseLost as exc:
            task.state = "lost"
            self._release(task)
            _warn(f"task {task.index} ({task.path}): lease lost ({exc}); another trainer will do it")
            return False

    # -- background renewal -----------------------------------------------------------------------

    def _hold(self, task: Task) -> None:
        task.renew_at = time.monotonic() + task.lease_seconds / 3
        with self._lock:
            self._held[task.index] = task
            if self.auto_renew and self._renewer is None:
                self._renewer = threading.Thread(
                    target=self._renew_loop, name="task-lease-renewal", daemon=True
                )
                self._renewer.start()
        self._wake.set()

    def _release(self, task: Task) -> None:
        with self._lock:
            self._held.pop(task.index, None)

    def _renew_loop(self) -> None:
        """Renew every held lease a third of its time after the last renewal."""
        while True:
            self._wake.clear()  # before looking: a task held after this wakes the wait below
            with self._lock:
                held = list(self._held.values())
            for task in held:
                if task.state == "leased" and task.renew_at <= time.monotonic():
                    try:
                        self.renew(task)
                    except TaskMasterError as exc:  # unreachable for retry_for: try again next round
                        _warn(f"renewing task {task.index} failed: {exc}")
                    task.renew_at = time.monotonic() + task.lease_seconds / 3
            soonest = min((t.renew_at for t in held if t.state == "leased"), default=None)
            self._wake.wait(None if soonest is None else max(soonest - time.monotonic(), 0.0))


def tasks(master: TaskMaster | None = None, **options: Any) -> Iterator[Task]:
    """Lease the job's tasks one at a time until every pass is over (see the module docstring).

    Each task is acknowledged done when the loop asks for the next one (unless the body already
    called ``done`` or ``fail``); an exception or ``break`` out of the body reports it failed."""
    m = master or TaskMaster(**options)
    while True:
        task = m.lease()
        if task is None:
            return
        finished = False
        try:
            yield task
            finished = True
        finally:
            if task.state == "leased":
                if finished:
                    task.done()
                else:
                    task.fail("the program left the task loop before acknowledging the task")
