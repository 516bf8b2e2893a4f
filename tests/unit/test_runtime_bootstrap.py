"""The init-container steps of a Kubernetes worker pod (``paddlecloud.runtime.bootstrap``), and the
worker container's command, run here on directories instead of a pod's ``/paddlecloud`` volume."""

from __future__ import annotations

import http.server
import io
import os
import socket
import subprocess
import sys
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from paddlecloud.backends.kubernetes import pods
from paddlecloud.runtime import bootstrap

TOKEN = "pcj_test"


def make_package(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def server() -> Iterator[tuple[str, dict[str, bytes]]]:
    """An HTTP server on loopback serving ``files[path]`` to requests bearing the job token."""
    files: dict[str, bytes] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self.send_error(401, "job token required")
                return
            body = files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", files
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_fetch_unpacks_the_package_and_the_runtime(
    server: tuple[str, dict[str, bytes]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, files = server
    files["/pkg.tar.gz"] = make_package({"train.py": "print('hi')\n", "data/x.txt": "x"})
    monkeypatch.setenv("PADDLECLOUD_PACKAGE_URL", url + "/pkg.tar.gz")
    monkeypatch.setenv("PADDLECLOUD_JOB_TOKEN", TOKEN)
    assert bootstrap.main(["fetch", "--dest", str(tmp_path)]) == 0
    assert (tmp_path / "job/train.py").read_text() == "print('hi')\n"
    assert (tmp_path / "job/data/x.txt").exists()
    assert (tmp_path / "lib/paddlecloud/runtime/launcher.py").exists()
    # torchrun finds the platform's rendezvous backend beside it (elastic torch jobs)
    assert (
        "paddlecloud = " in (tmp_path / "lib/paddlecloud_runtime-1.0.dist-info/entry_points.txt").read_text()
    )
    assert not (tmp_path / "package.tar.gz").exists()


def test_fetch_without_the_right_token_fails_at_once(
    server: tuple[str, dict[str, bytes]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = server
    with pytest.raises(bootstrap.BootstrapError, match="HTTP 401"):
        bootstrap.fetch(tmp_path, url + "/pkg.tar.gz", "wrong", attempts=5, delay=30)


def test_fetch_retries_then_gives_up(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    with pytest.raises(bootstrap.BootstrapError, match="failed 2 times"):
        bootstrap.fetch(tmp_path, f"http://127.0.0.1:{port}/p.tar.gz", TOKEN, attempts=2, delay=0.01)


def test_unpack_refuses_paths_leaving_the_directory(tmp_path: Path) -> None:
    archive = tmp_path / "evil.tar.gz"
    archive.write_bytes(make_package({"../evil.py": "x"}))
    with pytest.raises(bootstrap.BootstrapError, match="unpacking"):
        bootstrap.unpack(archive, tmp_path / "job")
    assert not (tmp_path / "evil.py").exists()


def test_install_without_requirements_builds_nothing(tmp_path: Path) -> None:
    (tmp_path / "job").mkdir()
    (tmp_path / "job/requirements.txt").write_text("# nothing\n\n")
    bootstrap.install(tmp_path)
    assert not (tmp_path / "venv").exists()


def test_install_builds_a_venv_from_requirements(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "job").mkdir()
    (tmp_path / "job/requirements.txt").write_text("numpy<2\n")
    ran: list[list[str]] = []
    monkeypatch.setattr(bootstrap, "_run", ran.append)
    bootstrap.install(tmp_path, python="python3")
    assert ran[0] == ["python3", "-m", "venv", "--system-site-packages", str(tmp_path / "venv")]
    assert ran[1][:3] == [str(tmp_path / "venv/bin/python"), "-m", "pip"]
    assert ran[1][-2:] == ["-r", str(tmp_path / "job/requirements.txt")]


def test_wait_returns_once_every_endpoint_listens() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        bootstrap.wait_for([f"127.0.0.1:{s.getsockname()[1]}"], timeout=5)


def test_wait_times_out(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert bootstrap.main(["wait", f"127.0.0.1:{port}", "--timeout", "0.3"]) == 1
    assert "did not accept connections in time" in capsys.readouterr().err


def run_worker(root: Path, entry: str) -> subprocess.CompletedProcess[str]:
    """The worker container's command with ``/paddlecloud`` at ``root``."""
    command = pods._WRAPPER.replace(pods.WORKSPACE, str(root))
    env = {
        "PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin",
        "HOME": str(root / "home"),
        "PADDLECLOUD_ENTRY": entry,
    }
    return subprocess.run(["/bin/sh", "-c", command], env=env, capture_output=True, text=True, timeout=60)


def test_the_worker_command_runs_the_entry_in_the_package(
    server: tuple[str, dict[str, bytes]], tmp_path: Path
) -> None:
    url, files = server
    files["/pkg.tar.gz"] = make_package(
        {"train.py": "import paddlecloud.runtime as r, os\nprint(r.__file__, os.getcwd())\n"}
    )
    bootstrap.fetch(tmp_path, url + "/pkg.tar.gz", TOKEN)
    done = run_worker(tmp_path, "python3 train.py")
    assert done.returncode == 0, done.stderr
    runtime_file, cwd = done.stdout.split()
    assert runtime_file.startswith(str(tmp_path / "lib"))  # the fetched runtime, not an installed one
    assert cwd == str(tmp_path / "job")
    assert (tmp_path / "run/exit.json").exists() and (tmp_path / "home").is_dir()
    assert run_worker(tmp_path, "exit 3").returncode == 3
