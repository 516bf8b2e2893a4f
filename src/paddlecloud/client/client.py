"""``paddlecloud.Client``: the Python SDK over the REST API (httpx). The CLI uses only this.

    Client() ──httpx──▶ /api/v1/...     (endpoint, token and TLS files from ~/.paddle/config or arguments)

Every failure is a :class:`paddlecloud.api.errors.PaddleCloudError`: server errors come back as the
same class the server raised (by stable code); a server that cannot be reached is
``ServerUnreachable`` (both by the shared HTTP session, ``client/session.py``, which ``pfs`` and
``tasks`` use too). Admins pass ``user=`` to act on another user's job. Tests inject an
``httpx.Client`` bound to the ASGI app (the transport seam).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from paddlecloud.api.adaptive import AdaptiveReport, AdaptiveState
from paddlecloud.api.images import RegistryLoginList, RegistryLoginView
from paddlecloud.api.models import (
    JobDetail,
    JobList,
    JobSpec,
    JobView,
    PackageView,
    QuotaView,
    TokenView,
    UserList,
    UserView,
    VersionView,
    WorkerList,
    WorkerView,
)
from paddlecloud.api.samplesets import (
    SampleJobList,
    SampleJobView,
    SampleSetList,
    SampleSetPhase,
    SampleSetView,
)
from paddlecloud.api.stored import STORED
from paddlecloud.api.users import UserDeleted
from paddlecloud.client.package import check_package_dir, pack_directory
from paddlecloud.client.pfs import Pfs
from paddlecloud.client.session import connect, tls_context
from paddlecloud.client.tasks import TaskMaster
from paddlecloud.core.phases import TERMINAL_PHASES

__all__ = ["Client", "tls_context"]


def _user(user: str | None) -> dict[str, Any]:
    return {"user": user} if user else {}


class Client:
    def __init__(
        self,
        endpoint: str | None = None,
        token: str | None = None,
        *,
        http: httpx.Client | None = None,
        timeout: float = 30.0,
        ca: str | None = None,
        cert: str | None = None,
        key: str | None = None,
    ) -> None:
        """``endpoint`` and ``token`` default to the current datacenter of the client config, and so do
        the TLS files ``ca`` (CA bundle), ``cert`` and ``key`` (client certificate) when the endpoint
        comes from there too."""
        self._session = connect(endpoint, token, http=http, timeout=timeout, tls=(ca, cert, key))
        self.endpoint = self._session.endpoint

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------------

    @property
    def pfs(self) -> Pfs:
        """The file service (``client.pfs.cp([...], "pfs:data")``)."""
        return Pfs(self._session)

    @property
    def tasks(self) -> TaskMaster:
        """Jobs' data task masters (``client.tasks.status("fit-a-line")``)."""
        return TaskMaster(self._session)

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """One API call (``path`` below ``/api/v1``); errors raised as PaddleCloudError."""
        return self._session.request(method, path, **kw)

    def stream_bytes(self, path: str, **kw: Any) -> Iterator[bytes]:
        """A GET whose body is yielded as it arrives."""
        return self._session.stream_bytes(path, **kw)

    # -- system ---------------------------------------------------------------------------------

    def version(self) -> VersionView:
        return VersionView.model_validate_json(self._session.request("GET", "/version").content)

    def health(self) -> bool:
        return bool(self._session.request("GET", "/health").json().get("status") == "ok")

    # -- jobs -----------------------------------------------------------------------------------

    def upload_package(self, directory: str | Path, job: str, entry: str | None = None) -> PackageView:
        """Pack ``directory`` and upload it to ``pfs:jobs/<job>/package.tar.gz`` (through the file
        service: resumable, verified, counted against the quota)."""
        check_package_dir(Path(directory))  # local mistakes first, before talking to the server
        limit = self.version().max_package_bytes
        archive, count = pack_directory(Path(directory), entry, limit)
        fs = self.pfs
        with archive:
            size = os.fstat(archive.fileno()).st_size
            fs.mkdir(f"pfs:jobs/{job}", parents=True)
            target = fs.full(f"pfs:jobs/{job}/package.tar.gz")
            fs.upload_file(Path(archive.name), target, overwrite=True)
        return PackageView(path=target, size=size, files=count)

    def submit(self, spec: JobSpec | Mapping[str, Any], package_dir: str | Path | None = None) -> JobDetail:
        """Submit a job. With ``package_dir`` the directory is uploaded first and ``package`` filled in.
        ``input`` / ``output`` may be written ``pfs:REL``."""
        body = dict(spec.model_dump(mode="json") if isinstance(spec, JobSpec) else spec)
        for key in ("input", "output", "package"):
            if isinstance(body.get(key), str) and body[key].startswith("pfs:"):
                body[key] = self.pfs.full(body[key])
        if package_dir is not None:
            entry = str(body.get("entry", "")) or None
            body["package"] = self.upload_package(package_dir, str(body.get("name", "")), entry).path
        answer = self._session.request("POST", "/jobs", json=body).content
        return JobDetail.model_validate_json(answer, context=STORED)  # the server validated it

    def jobs(self, *, all: bool = False, all_users: bool = False, user: str | None = None) -> list[JobView]:
        """Your jobs (``all``: finished ones too). Admins: ``all_users``: everyone's; ``user``: one's."""
        params: dict[str, Any] = {"all": str(all).lower()}
        if all_users:
            params["all_users"] = "true"
        if user:
            params["user"] = user
        r = self._session.request("GET", "/jobs", params=params)
        return JobList.model_validate_json(r.content).items

    def job(self, name: str, *, user: str | None = None) -> JobDetail:
        r = self._session.request("GET", f"/jobs/{name}", params=_user(user))
        return JobDetail.model_validate_json(r.content, context=STORED)  # as accepted at its submit

    def adaptive(self, name: str, *, user: str | None = None) -> AdaptiveState:
        """An adaptive-batch job's settings, the global batch assigned now, its reported noise scale,
        LR gain and step time (``not_adaptive`` for a fixed-batch job)."""
        r = self._session.request("GET", f"/jobs/{name}/adaptive", params=_user(user))
        return AdaptiveState.model_validate_json(r.content)

    def adaptive_report(self, name: str, report: AdaptiveReport) -> AdaptiveState:
        """Report a step (with the job's token, as its workers do); the assignment now."""
        body = report.model_dump(mode="json")
        r = self._session.request("POST", f"/jobs/{name}/adaptive/report", json=body)
        return AdaptiveState.model_validate_json(r.content)

    def workers(self, name: str, *, user: str | None = None) -> list[WorkerView]:
        r = self._session.request("GET", f"/jobs/{name}/workers", params=_user(user))
        return WorkerList.model_validate_json(r.content).items

    def kill(self, name: str, grace: float | None = None, *, user: str | None = None) -> JobView:
        params: dict[str, Any] = _user(user)
        if grace is not None:
            params["grace"] = grace
        r = self._session.request("POST", f"/jobs/{name}/kill", params=params)
        return JobView.model_validate_json(r.content)

    def delete(self, name: str, *, user: str | None = None) -> None:
        self._session.request("DELETE", f"/jobs/{name}", params=_user(user))

    def quota(self) -> QuotaView:
        return QuotaView.model_validate_json(self._session.request("GET", "/quota").content)

    def logs(
        self,
        name: str,
        *,
        worker: str | None = None,
        tail: int | None = None,
        follow: bool = False,
        previous: bool = False,
        user: str | None = None,
    ) -> Iterator[str]:
        """Yield log lines (with their newline). ``follow`` keeps reading until the workers end."""
        params: dict[str, Any] = {"follow": str(follow).lower(), "previous": str(previous).lower()}
        params.update(_user(user))
        if worker:
            params["worker"] = worker
        if tail is not None:
            params["tail"] = tail
        timeout = httpx.Timeout(30.0, read=None) if follow else httpx.Timeout(30.0)
        for line in self._session.stream_lines(f"/jobs/{name}/logs", params=params, timeout=timeout):
            yield line + "\n"

    def wait(
        self, name: str, *, timeout: float | None = None, poll: float = 1.0, user: str | None = None
    ) -> JobDetail:
        """Poll until the job reaches a terminal phase (or ``timeout`` seconds pass: TimeoutError)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.job(name, user=user)
            if job.phase in TERMINAL_PHASES:
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {name} still {job.phase} after {timeout} s")
            time.sleep(poll)

    # -- container registries ---------------------------------------------------------------------

    def registry_login(self, registry: str, username: str, password: str) -> None:
        """Store your credentials for ``registry`` (``host[:port]``) on the server: your jobs' pulls
        from it use them, nobody else's do; the password is never shown again."""
        body = {"username": username, "password": password}
        self._session.request("PUT", f"/registries/{quote(registry, safe=':')}/login", json=body)

    def registry_logout(self, registry: str) -> None:
        self._session.request("DELETE", f"/registries/{quote(registry, safe=':')}/login")

    def registry_logins(self) -> list[RegistryLoginView]:
        """The registries you are logged in to (never a password)."""
        return RegistryLoginList.model_validate_json(
            self._session.request("GET", "/registries").content
        ).logins

    # -- users ----------------------------------------------------------------------------------

    def whoami(self) -> UserView:
        """The user this client's token belongs to (and whether it is an admin)."""
        return UserView.model_validate_json(self._session.request("GET", "/whoami").content)

    def users(self) -> list[UserView]:
        """Every user (admins only)."""
        return UserList.model_validate_json(self._session.request("GET", "/users").content).items

    def create_user(self, name: str, admin: bool = False) -> TokenView:
        """Create a user (admins only). The returned token is shown this once; the server keeps a hash."""
        r = self._session.request("POST", "/users", json={"name": name, "admin": admin})
        return TokenView.model_validate_json(r.content)

    def set_quotas(self, name: str, **limits: str | int | None) -> None:
        """Admins: change ``name``'s limits: ``storage="500Gi"``, ``cpu="8"``, ``memory="32Gi"``,
        ``gpu=4``; None removes a limit (storage: back to the platform default). Others stay."""
        self._session.request("PUT", f"/users/{name}/quota", json=limits)

    def set_storage_quota(self, name: str, storage: str | None) -> None:
        """Admins: ``name``'s PFS storage limit (``"500Gi"``), or None for the platform default."""
        self.set_quotas(name, storage=storage)

    def rotate_token(self, name: str) -> TokenView:
        """Issue a new token for ``name`` (admins only); the old one stops working at once."""
        return TokenView.model_validate_json(self._session.request("POST", f"/users/{name}/token").content)

    def set_admin(self, name: str, admin: bool) -> UserView:
        """Grant (``admin=True``) or revoke admin status of ``name`` (admins only)."""
        r = self._session.request("PUT", f"/users/{name}/admin", json={"admin": admin})
        return UserView.model_validate_json(r.content)

    def delete_user(self, name: str, *, force: bool = False, delete_files: bool = False) -> UserDeleted:
        """Delete user ``name`` (admins only): ``force`` kills their active jobs (else ``user_has_jobs``),
        ``delete_files`` removes their PFS home too (else it is kept)."""
        params = {"force": str(force).lower(), "delete_files": str(delete_files).lower()}
        r = self._session.request("DELETE", f"/users/{name}", params=params)
        return UserDeleted.model_validate_json(r.content)

    # -- SampleSets -------------------------------------------------------------------------------

    def create_sampleset(
        self, name: str, source: str, *, cache_size: str | None = None, nodes: list[str] | None = None
    ) -> SampleSetView:
        """Create a SampleSet from the PFS folder ``source`` (``pfs:REL`` or ``/pfs/...``); the server
        syncs it into the cache engine and warms the nodes' caches up by itself."""
        body: dict[str, Any] = {"name": name, "source": self.pfs.full(source)}  # the server validates
        if cache_size is not None:
            body["cache_size"] = cache_size
        if nodes is not None:
            body["nodes"] = nodes
        r = self._session.request("POST", "/samplesets", json=body)
        return SampleSetView.model_validate_json(r.content)

    def samplesets(self, *, all_users: bool = False) -> list[SampleSetView]:
        """Your SampleSets (admins, ``all_users``: everyone's)."""
        params = {"all": "true"} if all_users else {}
        r = self._session.request("GET", "/samplesets", params=params)
        return SampleSetList.model_validate_json(r.content).items

    def sampleset(self, name: str) -> SampleSetView:
        return SampleSetView.model_validate_json(self._session.request("GET", f"/samplesets/{name}").content)

    def sampleset_job(self, name: str, kind: str, path: str = "") -> SampleJobView:
        """Queue a SampleJob: ``sync``, ``warmup`` (``path`` "" for all), ``clear`` or ``rmr`` (``path``)."""
        r = self._session.request("POST", f"/samplesets/{name}/jobs", json={"kind": kind, "path": path})
        return SampleJobView.model_validate_json(r.content)

    def sample_jobs(self, name: str) -> list[SampleJobView]:
        """The SampleSet's SampleJobs, latest first."""
        r = self._session.request("GET", f"/samplesets/{name}/jobs")
        return SampleJobList.model_validate_json(r.content).items

    def delete_sampleset(self, name: str) -> SampleSetView:
        """Unmount and remove it (the server finishes in the background; ``sampleset_in_use`` while a
        job not finished names it)."""
        return SampleSetView.model_validate_json(
            self._session.request("DELETE", f"/samplesets/{name}").content
        )

    def wait_sampleset(self, name: str, *, timeout: float = 600.0, poll: float = 0.5) -> SampleSetView:
        """Poll until the SampleSet is Ready or Failed with no SampleJob left to run (``TimeoutError``
        after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            view = self.sampleset(name)
            idle = all(j.phase in ("Succeeded", "Failed") for j in view.jobs)
            if idle and view.phase in (SampleSetPhase.READY, SampleSetPhase.FAILED):
                return view
            if time.monotonic() > deadline:
                raise TimeoutError(f"SampleSet {name} still {view.phase} after {timeout:g} s: {view.message}")
            time.sleep(poll)
