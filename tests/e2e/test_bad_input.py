"""Bad input: one clear line on stderr, a non-zero exit, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import Server, write_package

pytestmark = pytest.mark.e2e


@pytest.fixture
def pkg(tmp_path: Path) -> Path:
    return write_package(tmp_path / "pkg", {"main.py": "print('ok')\n"})


def _one_error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["--name", "Bad_Name"], 1, "name: must be a DNS-1123 label"),
        (["--name", "x" * 64], 1, "at most 63 characters"),
        (["--cpu", "1x"], 1, "trainers.cpu: '1x' is not a valid cpu quantity"),
        (["--memory", "lots"], 1, "trainers.memory"),
        (["--framework", "tf"], 2, "'tf' is not one of"),
        (["--entry", "python missing.py"], 1, "missing.py, which is not in the package"),
        (["--framework", "paddle-ps"], 1, "needs at least 1 pserver"),
        (["--trainers", "3", "--max-instance", "2"], 1, "min <= count <= max"),
        (["--env", "NOEQUALS"], 2, "not KEY=VALUE"),
    ],
)
def test_bad_submit(server: Server, pkg: Path, args: list[str], code: int, needle: str) -> None:
    base = ["submit", str(pkg), "--entry", "python main.py", "--cpu", "100m"]
    r = server.cli(*base, *args, check=False)
    assert r.returncode == code, r.stderr
    assert needle in _one_error_line(r.stderr)


def test_missing_package_dir(server: Server, tmp_path: Path) -> None:
    r = server.cli("submit", str(tmp_path / "nope"), "--entry", "python main.py", check=False)
    assert r.returncode == 1
    assert "does not exist" in _one_error_line(r.stderr)


def test_unknown_job(server: Server) -> None:
    for args in (["describe", "ghost"], ["logs", "ghost"], ["kill", "ghost"], ["get", "workers", "ghost"]):
        r = server.cli(*args, check=False)
        assert r.returncode == 1
        assert "job 'ghost' not found" in _one_error_line(r.stderr)


def test_duplicate_name(server: Server, pkg: Path) -> None:
    server.cli("submit", str(pkg), "--name", "twice", "--entry", "python main.py", "--cpu", "100m")
    r = server.cli("submit", str(pkg), "--name", "twice", "--entry", "python main.py", check=False)
    assert r.returncode == 1
    assert "already exists" in _one_error_line(r.stderr)
    server.wait_phase("twice", {"Succeeded"})
    server.cli("kill", "twice", "--rm")


def test_package_too_large(server: Server, tmp_path: Path) -> None:
    import os

    pkg = write_package(tmp_path / "fat", {"main.py": "print(1)\n"})
    (pkg / "blob.bin").write_bytes(os.urandom(101 * 2**20))
    r = server.cli("submit", str(pkg), "--entry", "python main.py", check=False, timeout=300)
    assert r.returncode == 1
    assert "larger than" in _one_error_line(r.stderr)


def test_server_down(tmp_path: Path) -> None:
    import os
    import subprocess

    from .conftest import PADDLECLOUD, free_port

    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLECLOUD_")}
    env |= {"PADDLECLOUD_ENDPOINT": f"http://127.0.0.1:{free_port()}", "PADDLECLOUD_TOKEN": "x",
            "PADDLECLOUD_CONFIG": str(tmp_path / "config")}  # fmt: skip
    r = subprocess.run([PADDLECLOUD, "get", "jobs"], capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 3
    assert "cannot reach the PaddleCloud server" in _one_error_line(r.stderr)
