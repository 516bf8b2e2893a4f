"""What a worker that fetches its job (Kubernetes pods' init containers; any backend that declares
``fetch-package``) runs before the entry starts.

    fetch    [PaddleCloud image]  copy paddlecloud.runtime to DEST/lib; GET $PADDLECLOUD_PACKAGE_URL
                                  (Bearer $PADDLECLOUD_JOB_TOKEN, retried) and unpack it into DEST/job
    install  [the job's image]    DEST/job/requirements.txt → venv DEST/venv (--system-site-packages)
    wait     [PaddleCloud image]  until every HOST:PORT accepts a TCP connection (the pservers)

Run as ``python -m paddlecloud.runtime.bootstrap {fetch,install,wait} ...``; errors end with exit
code 1 and a one-line reason on stderr (the pod's termination message). Standard library only.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from paddlecloud.runtime import apiclient
from paddlecloud.runtime import contract as c
from paddlecloud.runtime.torchelastic import install_entry_point

__all__ = ["fetch", "install", "main", "unpack", "wait_for"]

_CHUNK = 1 << 20


class BootstrapError(RuntimeError):
    """A step failed; the message says why."""


def _download(url: str, token: str, target: Path, attempts: int, delay: float) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    for attempt in range(1, attempts + 1):
        try:
            req = urllib.request.Request(url, headers=headers)
            with apiclient.opener().open(req, timeout=60) as resp, open(target, "wb") as out:
                shutil.copyfileobj(resp, out, _CHUNK)
            return
        except urllib.error.HTTPError as exc:
            if exc.code < 500 and exc.code != 429:  # our request is wrong: retrying will not help
                body = exc.read(512).decode("utf-8", "replace").strip()
                raise BootstrapError(f"fetching the package: HTTP {exc.code} from {url}: {body}") from None
            why = f"HTTP {exc.code}"
        except (OSError, urllib.error.URLError) as exc:
            why = str(exc)
        if attempt == attempts:
            raise BootstrapError(f"fetching the package from {url} failed {attempts} times: {why}")
        print(f"fetch: {why}; retrying in {delay:g} s", file=sys.stderr, flush=True)
        time.sleep(delay)
        delay = min(delay * 2, 30.0)


def unpack(archive: Path, dest: Path) -> None:
    """Unpack a tar.gz safely: no absolute paths, no ``..``, no links or devices leading outside."""
    dest.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:*") as tar:
            tar.extractall(dest, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise BootstrapError(f"unpacking the package: {exc}") from None


def _copy_runtime(lib: Path) -> None:
    """Put ``paddlecloud.runtime`` (this package, standard library only) where workers import it."""
    pkg = lib / "paddlecloud"
    runtime = Path(__file__).resolve().parent
    shutil.copytree(
        runtime, pkg / "runtime", dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__")
    )
    init = pkg / "__init__.py"
    if not init.exists():
        init.write_text('"""PaddleCloud worker-side runtime (copied by the fetch init container)."""\n')
    install_entry_point(lib)  # torchrun's rendezvous backend "paddlecloud" (elastic torch jobs)


def fetch(dest: Path, url: str, token: str, attempts: int = 8, delay: float = 1.0) -> None:
    """``DEST/lib`` (the runtime) and ``DEST/job`` (the unpacked package)."""
    if not url:
        raise BootstrapError(f"{c.PACKAGE_URL} is not set")
    _copy_runtime(dest / "lib")
    archive = dest / "package.tar.gz"
    _download(url, token, archive, attempts, delay)
    unpack(archive, dest / "job")
    archive.unlink()
    print(f"fetch: package unpacked into {dest / 'job'}", flush=True)


def _run(cmd: list[str]) -> None:
    print("install: " + " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, stdout=sys.stdout, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        raise BootstrapError(f"{' '.join(cmd[:4])} ... exited with {proc.returncode} (see the log above)")


def install(dest: Path, python: str = sys.executable) -> None:
    """Build ``DEST/venv`` from ``DEST/job/requirements.txt``; nothing to do without one."""
    req = dest / "job" / "requirements.txt"
    if not req.is_file() or not any(
        ln.strip() and not ln.lstrip().startswith("#") for ln in req.read_text().splitlines()
    ):
        print("install: no requirements.txt; the image's python is used as is", flush=True)
        return
    venv = dest / "venv"
    _run([python, "-m", "venv", "--system-site-packages", str(venv)])
    pip = [
        str(venv / "bin" / "python"),
        "-m",
        "pip",
        "install",
        "--no-cache-dir",
        "--disable-pip-version-check",
    ]
    _run([*pip, "-r", str(req)])


def _split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise BootstrapError(f"not a host:port endpoint: {endpoint!r}")
    return host, int(port)


def wait_for(endpoints: list[str], timeout: float | None = None, interval: float = 1.0) -> None:
    """Return once every endpoint accepts a TCP connection; ``timeout`` None waits for ever."""
    deadline = None if timeout is None else time.monotonic() + timeout
    pending = [_split(e) for e in endpoints]
    last_report = 0.0
    while pending:
        host, port = pending[0]
        try:
            with socket.create_connection((host, port), timeout=2):
                pass
            print(f"wait: {host}:{port} is up", flush=True)
            pending.pop(0)
            continue
        except OSError as exc:
            why = str(exc)
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            raise BootstrapError(f"{host}:{port} did not accept connections in time: {why}")
        if now - last_report >= 10:
            print(f"wait: {host}:{port} not up yet ({why})", flush=True)
            last_report = now
        time.sleep(interval)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paddlecloud.runtime.bootstrap")
    sub = parser.add_subparsers(dest="step", required=True)
    p_fetch = sub.add_parser("fetch", help="copy the runtime, download and unpack the job package")
    p_fetch.add_argument("--dest", type=Path, required=True)
    p_install = sub.add_parser("install", help="requirements.txt into a venv")
    p_install.add_argument("--dest", type=Path, required=True)
    p_wait = sub.add_parser("wait", help="until every HOST:PORT accepts connections")
    p_wait.add_argument("endpoints", nargs="+")
    p_wait.add_argument("--timeout", type=float, default=None)
    args = parser.parse_args(argv)
    try:
        if args.step == "fetch":
            url = os.environ.get(c.PACKAGE_URL, "")
            fetch(args.dest, url, os.environ.get(c.JOB_TOKEN, ""))
        elif args.step == "install":
            install(args.dest)
        else:
            wait_for(args.endpoints, args.timeout)
    except BootstrapError as exc:
        print(f"{args.step}: {exc}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
