"""``paddlecloud.Client``: the Python SDK over the REST API (httpx). The CLI uses only this.

    Client() ──httpx──▶ /api/v1/...     (endpoint and token from ~/.paddle/config or arguments)

Every failure is a :class:`paddlecloud.api.errors.PaddleCloudError`: server errors come back as the
same class the server raised (by stable code); a server that cannot be reached is
``ServerUnreachable``. Tests inject an ``httpx.Client`` bound to the ASGI app (the transport seam).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

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
    VersionView,
    WorkerList,
    WorkerView,
)
from paddlecloud.client.config import load_config
from paddlecloud.client.package import check_package_dir, pack_directory
from paddlecloud.core.phases import TERMINAL_PHASES

__all__ = ["Client"]

_UPLOAD_CHUNK = 1 << 20


def _file_chunks(f: IO[bytes]) -> Iterator[bytes]:
    while chunk := f.read(_UPLOAD_CHUNK):
        yield chunk


class Client:
    def __init__(
        self,
        endpoint: str | None = None,
        token: str | None = None,
        *,
        http: httpx.Client | None = None,
        timeout: float = 30.0,
    ) -> None:
        if endpoint is None or token is None:
            cfg = load_config()
            if cfg.current is not None:
                endpoint = endpoint or cfg.current.endpoint
                token = token or cfg.current.token
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
            http = httpx.Client(base_url=self.endpoint, timeout=timeout)
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

    def _request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        try:
            response = self._http.request(method, API_PREFIX + path, **kw)
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from None
        self._check(response)
        return response

    def _unreachable(self, exc: Exception) -> PaddleCloudError:
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

    def upload_package(self, directory: str | Path, entry: str | None = None) -> PackageView:
        check_package_dir(Path(directory))  # local mistakes first, before talking to the server
        limit = self.version().max_package_bytes
        archive, _count = pack_directory(Path(directory), entry, limit)
        with archive:
            r = self._request(
                "POST",
                "/packages",
                content=_file_chunks(archive),
                headers={"Content-Type": "application/gzip"},
            )
        return PackageView.model_validate_json(r.content)

    def submit(self, spec: JobSpec | Mapping[str, Any], package_dir: str | Path | None = None) -> JobDetail:
        """Submit a job. With ``package_dir`` the directory is uploaded first and ``package`` filled in."""
        body = dict(spec.model_dump(mode="json") if isinstance(spec, JobSpec) else spec)
        if package_dir is not None:
            body["package"] = self.upload_package(package_dir, str(body.get("entry", "")) or None).id
        return JobDetail.model_validate_json(self._request("POST", "/jobs", json=body).content)

    def jobs(self, *, all: bool = False) -> list[JobView]:
        r = self._request("GET", "/jobs", params={"all": str(all).lower()})
        return JobList.model_validate_json(r.content).items

    def job(self, name: str) -> JobDetail:
        return JobDetail.model_validate_json(self._request("GET", f"/jobs/{name}").content)

    def workers(self, name: str) -> list[WorkerView]:
        return WorkerList.model_validate_json(self._request("GET", f"/jobs/{name}/workers").content).items

    def kill(self, name: str, grace: float | None = None) -> JobView:
        params = {} if grace is None else {"grace": grace}
        return JobView.model_validate_json(self._request("POST", f"/jobs/{name}/kill", params=params).content)

    def delete(self, name: str) -> None:
        self._request("DELETE", f"/jobs/{name}")

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
    ) -> Iterator[str]:
        """Yield log lines (with their newline). ``follow`` keeps reading until the workers end."""
        params: dict[str, Any] = {"follow": str(follow).lower(), "previous": str(previous).lower()}
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

    def wait(self, name: str, *, timeout: float | None = None, poll: float = 1.0) -> JobDetail:
        """Poll until the job reaches a terminal phase (or ``timeout`` seconds pass: TimeoutError)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            job = self.job(name)
            if job.phase in TERMINAL_PHASES:
                return job
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"job {name} still {job.phase} after {timeout} s")
            time.sleep(poll)
