"""``paddlecloud.Client``: the Python SDK over the REST API (httpx). The CLI uses only this.

    Client() ──httpx──▶ /api/v1/...     (endpoint, token and TLS files from ~/.paddle/config or arguments)

Every failure is a :class:`paddlecloud.api.errors.PaddleCloudError`: server errors come back as the
same class the server raised (by stable code); a server that cannot be reached is
``ServerUnreachable``. Admins pass ``user=`` to act on another user's job. Tests inject an
``httpx.Client`` bound to the ASGI app (the transport seam).
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import httpx

from paddlecloud._version import API_VERSION, MIN_SERVER_API_VERSION
from paddlecloud.api import API_PREFIX, HEADER_API_VERSION
from paddlecloud.api.errors import (
    ErrorCode,
    InvalidInput,
    PaddleCloudError,
    ServerUnreachable,
    VersionMismatch,
    error_from_body,
)
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
from paddlecloud.api.stored import STORED
from paddlecloud.api.users import UserDeleted
from paddlecloud.client.config import load_config
from paddlecloud.client.package import check_package_dir, pack_directory
from paddlecloud.client.pfs import Pfs
from paddlecloud.client.tasks import TaskMaster
from paddlecloud.core.phases import TERMINAL_PHASES

__all__ = ["Client", "tls_context"]


def tls_context(ca: str | None, cert: str | None, key: str | None) -> ssl.SSLContext | None:
    """What ``verify=ca, cert=(cert, key)`` meant to httpx before 0.28 deprecated both: an SSL context
    trusting ``ca`` (a file or a directory; default: httpx's own trust store) and presenting the client
    certificate. ``None`` when no TLS file is set (httpx's defaults apply)."""
    if not (ca or cert or key):
        return None
    if bool(cert) != bool(key):
        raise InvalidInput("a TLS client certificate needs both cert and key", field="cert" if key else "key")
    try:
        if ca:
            ctx = (
                ssl.create_default_context(capath=ca)
                if os.path.isdir(ca)
                else ssl.create_default_context(cafile=ca)
            )
        else:
            ctx = httpx.create_ssl_context()
        if cert:
            ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        files = ", ".join(f"{k} {v}" for k, v in (("ca", ca), ("cert", cert), ("key", key)) if v)
        raise InvalidInput(f"cannot load the TLS files ({files}): {exc}") from None
    return ctx


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
        if endpoint is None or token is None:
            cfg = load_config()
            dc = cfg.current
            if dc is not None:
                if not endpoint:
                    ca, cert, key = ca or dc.ca, cert or dc.cert, key or dc.key
                endpoint = endpoint or dc.endpoint
                token = token or dc.token
        if not endpoint and http is None:
            raise InvalidInput(
                "no PaddleCloud endpoint configured: run `paddlecloud up` for a local platform, "
                "or `paddlecloud login`; or set PADDLECLOUD_ENDPOINT"
            )
        self.endpoint = (endpoint or "http://testserver").rstrip("/")
        headers = {HEADER_API_VERSION: str(API_VERSION)}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if http is None:
            ctx = tls_context(ca, cert, key)
            if ctx is None:
                http = httpx.Client(base_url=self.endpoint, timeout=timeout)
            else:
                http = httpx.Client(base_url=self.endpoint, timeout=timeout, verify=ctx)
        http.headers.update(headers)
        self._http = http
        self._checked = False

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -------------------------------------------------------------------------------

    def _check(self, response: httpx.Response) -> None:
        if not self._checked:
            sent = response.headers.get(HEADER_API_VERSION)
            if sent is not None and sent.isdigit() and int(sent) < MIN_SERVER_API_VERSION:
                raise VersionMismatch(
                    f"server API version {sent} is older than this client needs ({MIN_SERVER_API_VERSION}): "
                    "upgrade the server or use an older paddlecloud",
                    code=ErrorCode.SERVER_TOO_OLD,
                )
            self._checked = True
        if response.status_code >= 400:
            try:
                body: Any = response.json()
            except ValueError:
                body = None
            raise error_from_body(response.status_code, body)

    @property
    def pfs(self) -> Pfs:
        """The file service (``client.pfs.cp([...], "pfs:data")``)."""
        return Pfs(self)

    @property
    def tasks(self) -> TaskMaster:
        """Jobs' data task masters (``client.tasks.status("fit-a-line")``)."""
        return TaskMaster(self)

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """One API call (``path`` below ``/api/v1``); errors raised as PaddleCloudError."""
        return self._request(method, path, **kw)

    def stream_bytes(self, path: str, **kw: Any) -> Iterator[bytes]:
        """A GET whose body is yielded as it arrives."""
        try:
            with self._http.stream("GET", API_PREFIX + path, **kw) as response:
                if response.status_code >= 400:
                    response.read()
                self._check(response)
                yield from response.iter_bytes(1 << 20)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            response = self._http.request(method, API_PREFIX + path, **kw)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        self._check(response)
        return response

    def _unreachable(self, exc: Exception) -> PaddleCloudError:
        if isinstance(exc, httpx.ConnectError) and ("SSL" in str(exc) or "certificate" in str(exc)):
            return ServerUnreachable(
                f"TLS handshake with {self.endpoint} failed: {exc}; check the datacenter's ca, cert and "
                "key (paddlecloud login --ca/--cert/--key)"
            )
        return ServerUnreachable(
            f"cannot reach the PaddleCloud server at {self.endpoint} ({type(exc).__name__}); "
            "is `paddlecloud up` running?"
        )

    # -- system ---------------------------------------------------------------------------------

    def version(self) -> VersionView:
        return VersionView.model_validate_json(self._request("GET", "/version").content)

    def health(self) -> bool:
        return bool(self._request("GET", "/health").json().get("status") == "ok")

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
        answer = self._request("POST", "/jobs", json=body).content
        return JobDetail.model_validate_json(answer, context=STORED)  # the server validated it

    def jobs(self, *, all: bool = False, all_users: bool = False, user: str | None = None) -> list[JobView]:
        """Your jobs (``all``: finished ones too). Admins: ``all_users``: everyone's; ``user``: one's."""
        params: dict[str, Any] = {"all": str(all).lower()}
        if all_users:
            params["all_users"] = "true"
        if user:
            params["user"] = user
        r = self._request("GET", "/jobs", params=params)
        return JobList.model_validate_json(r.content).items

    def job(self, name: str, *, user: str | None = None) -> JobDetail:
        r = self._request("GET", f"/jobs/{name}", params=_user(user))
        return JobDetail.model_validate_json(r.content, context=STORED)  # as accepted at its submit

    def workers(self, name: str, *, user: str | None = None) -> list[WorkerView]:
        r = self._request("GET", f"/jobs/{name}/workers", params=_user(user))
        return WorkerList.model_validate_json(r.content).items

    def kill(self, name: str, grace: float | None = None, *, user: str | None = None) -> JobView:
        params: dict[str, Any] = _user(user)
        if grace is not None:
            params["grace"] = grace
        return JobView.model_validate_json(self._request("POST", f"/jobs/{name}/kill", params=params).content)

    def delete(self, name: str, *, user: str | None = None) -> None:
        self._request("DELETE", f"/jobs/{name}", params=_user(user))

    def quota(self) -> QuotaView:
        return QuotaView.model_validate_json(self._request("GET", "/quota").content)

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
        try:
            with self._http.stream(
                "GET", f"{API_PREFIX}/jobs/{name}/logs", params=params, timeout=timeout
            ) as response:
                if response.status_code >= 400:
                    response.read()
                self._check(response)
                for line in response.iter_lines():
                    yield line + "\n"
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None

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

    # -- users ----------------------------------------------------------------------------------

    def whoami(self) -> UserView:
        """The user this client's token belongs to (and whether it is an admin)."""
        return UserView.model_validate_json(self._request("GET", "/whoami").content)

    def users(self) -> list[UserView]:
        """Every user (admins only)."""
        return UserList.model_validate_json(self._request("GET", "/users").content).items

    def create_user(self, name: str, admin: bool = False) -> TokenView:
        """Create a user (admins only). The returned token is shown this once; the server keeps a hash."""
        r = self._request("POST", "/users", json={"name": name, "admin": admin})
        return TokenView.model_validate_json(r.content)

    def set_quotas(self, name: str, **limits: str | int | None) -> None:
        """Admins: change ``name``'s limits: ``storage="500Gi"``, ``cpu="8"``, ``memory="32Gi"``,
        ``gpu=4``; None removes a limit (storage: back to the platform default). Others stay."""
        self._request("PUT", f"/users/{name}/quota", json=limits)

    def set_storage_quota(self, name: str, storage: str | None) -> None:
        """Admins: ``name``'s PFS storage limit (``"500Gi"``), or None for the platform default."""
        self.set_quotas(name, storage=storage)

    def rotate_token(self, name: str) -> TokenView:
        """Issue a new token for ``name`` (admins only); the old one stops working at once."""
        return TokenView.model_validate_json(self._request("POST", f"/users/{name}/token").content)

    def set_admin(self, name: str, admin: bool) -> UserView:
        """Grant (``admin=True``) or revoke admin status of ``name`` (admins only)."""
        r = self._request("PUT", f"/users/{name}/admin", json={"admin": admin})
        return UserView.model_validate_json(r.content)

    def delete_user(self, name: str, *, force: bool = False, delete_files: bool = False) -> UserDeleted:
        """Delete user ``name`` (admins only): ``force`` kills their active jobs (else ``user_has_jobs``),
        ``delete_files`` removes their PFS home too (else it is kept)."""
        params = {"force": str(force).lower(), "delete_files": str(delete_files).lower()}
        r = self._request("DELETE", f"/users/{name}", params=params)
        return UserDeleted.model_validate_json(r.content)
