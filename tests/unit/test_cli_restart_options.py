"""``paddlecloud submit --restart-policy/--max-restarts/...`` put the restart fields in the job spec."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from paddlecloud.api.models import JobSpec
from paddlecloud.cli import jobs as cli_jobs

PKG = "/pfs/local/home/alice/jobs/j/package.tar.gz"


def _submitted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *args: str) -> dict[str, Any]:
    sent: dict[str, Any] = {}

    class FakeClient:
        def submit(self, spec: dict[str, Any], package_dir: Path) -> SimpleNamespace:
            sent.update(spec)
            return SimpleNamespace(name=spec["name"], phase="Queued", message="")

    monkeypatch.setattr(cli_jobs, "Client", FakeClient)
    result = CliRunner().invoke(cli_jobs.submit, [str(tmp_path), "--name", "j", "--entry", "x", *args])
    assert result.exit_code == 0, result.output
    return sent


def test_defaults_send_no_restart_fields(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    spec = _submitted(monkeypatch, tmp_path)
    assert "restart" not in spec["trainers"] and "max_restarts" not in spec
    rules = JobSpec.model_validate({**spec, "package": PKG}).restart_rules()
    assert (rules.trainer, rules.backoff_reset_s) == ("Never", 600.0)


def test_restart_options_reach_both_roles_and_the_job(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    spec = _submitted(
        monkeypatch, tmp_path, "--pservers", "1", "--restart-policy", "ExitCode", "--max-restarts", "4",
        "--retry-exit-code", "75", "--retry-exit-code", "3", "--restart-backoff", "0.5",
        "--restart-backoff-reset", "120",
    )  # fmt: skip
    rules = JobSpec.model_validate({**spec, "package": PKG}).restart_rules()
    assert (rules.trainer, rules.pserver, rules.max_restarts) == ("ExitCode", "ExitCode", 4)
    assert (rules.retry_exit_codes, rules.backoff_s, rules.backoff_reset_s) == (frozenset({3, 75}), 0.5, 120)


def test_an_unknown_policy_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli_jobs.submit, [str(tmp_path), "--entry", "x", "--restart-policy", "Always"]
    )
    assert result.exit_code == 2
    assert "'Never', 'OnFailure', 'ExitCode'" in result.output
