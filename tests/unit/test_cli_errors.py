"""The ``paddlecloud`` command's error contract, run as a real subprocess.

Every failure is one ``error: ...`` line on stderr, never a traceback, and exit status 1 (the platform
said no), 2 (bad usage) or 3 (server unreachable). Nothing listens on 127.0.0.1:1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

EXE = Path(sys.executable).parent / "paddlecloud"
UNREACHABLE = "http://127.0.0.1:1"


@pytest.fixture(autouse=True)
def _needs_the_console_script() -> None:
    if not EXE.exists():
        pytest.skip(f"{EXE} is not installed (pip install -e .)")


@pytest.fixture
def package(tmp_path: Path) -> Path:
    root = tmp_path / "job"
    root.mkdir()
    (root / "x.py").write_text("print(1)\n")
    return root


def run_cli(
    tmp_path: Path, *args: str, endpoint: str | None = UNREACHABLE
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLECLOUD_")}
    env.update(HOME=str(tmp_path), PADDLECLOUD_CONFIG=str(tmp_path / "no-config.yaml"), COLUMNS="200")
    if endpoint is not None:
        env.update(PADDLECLOUD_ENDPOINT=endpoint, PADDLECLOUD_TOKEN="x")
    return subprocess.run(
        [str(EXE), *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=30, check=False
    )


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    return lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ["get", "jobs"],
        ["get", "jobs", "-a", "-o", "json"],
        ["get", "quota"],
        ["get", "workers", "j"],
        ["describe", "j"],
        ["logs", "j"],
        ["kill", "j"],
        ["version"],
    ],
    ids=lambda a: " ".join(a),
)
def test_unreachable_server_exits_3(tmp_path: Path, args: list[str]) -> None:
    proc = run_cli(tmp_path, *args)
    assert proc.returncode == 3
    line = one_error_line(proc)
    assert "cannot reach" in line and UNREACHABLE in line
    assert proc.stdout == ""


def test_no_endpoint_configured_exits_1(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "get", "jobs", endpoint=None)
    assert proc.returncode == 1
    assert "no PaddleCloud endpoint configured" in one_error_line(proc)


def test_submit_missing_directory_fails_cleanly(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "submit", "/nonexistent", "--entry", "python x.py")
    assert proc.returncode != 0
    one_error_line(proc)


def test_submit_missing_directory_names_the_directory(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "submit", "/nonexistent", "--entry", "python x.py")
    assert "/nonexistent" in one_error_line(proc)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--framework", "tf", "--entry", "python x.py"], "--framework"),
        (["--entry", "python x.py", "--env", "NOEQUALS"], "--env"),
        (["--entry", "python x.py", "--trainers", "many"], "--trainers"),
        ([], "--entry"),
    ],
    ids=["framework", "env", "trainers", "no-entry"],
)
def test_submit_usage_errors_exit_2(tmp_path: Path, package: Path, args: list[str], words: str) -> None:
    proc = run_cli(tmp_path, "submit", str(package), *args)
    assert proc.returncode == 2
    line = one_error_line(proc)
    assert words in line
    assert "--help" in line


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["bogus"], "No such command"),
        (["kill"], "Missing argument"),
        (["get", "jobs", "-o", "xml"], "-o"),
        (["up", "--policy", "lifo"], "--policy"),
        (["up", "--default-quota", "tpu=1"], "--default-quota"),
        (["up", "--default-quota", "gpu=two"], "--default-quota"),
        (["up", "--default-quota", "cpu=lots"], "--default-quota"),
        (["up", "--max-request-size", "1Ki"], "outside 64Ki..1Gi"),
        (["up", "--max-request-size", "big"], "--max-request-size"),
        (["up", "--backend", "lsf"], "unknown backend 'lsf': choose one of local ("),
        (
            ["up", "--backend", "kubernetes", "--isolation", "none"],
            "--isolation is an option of the local and slurm backends (--backend local|slurm)",
        ),
        (["up", "--kube-namespace", "ns"], "--kube-namespace is an option of the kubernetes backend"),
        (["up", "--backend", "kubernetes", "--kube-egress", "10.0.0.1"], "--kube-egress"),
        (["up", "--node-cpu", "lots"], "--node-cpu"),
        (["up", "--env-cache-size", "huge"], "--env-cache-size"),
        (["up", "--metrics-public", "--metrics-token-file", "/dev/null"], "exclude each other"),
        (["up", "--metrics-token-file", "/dev/null"], "at least 16 characters"),
    ],
    ids=[
        "unknown-command",
        "missing-argument",
        "bad-format",
        "policy",
        "quota-key",
        "quota-gpu",
        "quota-cpu",
        "request-size-small",
        "request-size-bad",
        "unknown-backend",
        "local-option-on-kubernetes",
        "kubernetes-option-on-local",
        "kube-egress-not-a-cidr",
        "node-cpu",
        "env-cache-size",
        "metrics-public-and-token",
        "metrics-token-short",
    ],
)
def test_other_usage_errors_exit_2(tmp_path: Path, args: list[str], words: str) -> None:
    proc = run_cli(tmp_path, *args)
    assert proc.returncode == 2
    assert words in one_error_line(proc)


def test_help_exits_0(tmp_path: Path) -> None:
    proc = run_cli(tmp_path, "--help")
    assert proc.returncode == 0
    assert proc.stdout.startswith("Usage: paddlecloud")
    assert proc.stderr == ""


@pytest.mark.parametrize("args", [[], ["get"]], ids=["bare", "get"])
def test_group_without_subcommand_is_not_a_multiline_error(tmp_path: Path, args: list[str]) -> None:
    proc = run_cli(tmp_path, *args)
    assert "error: Usage:" not in proc.stderr
    assert len(proc.stderr.splitlines()) <= 1
