"""Submit's batch options become the JobSpec ``batch`` field, bad ones are usage errors (exit 2) before
anything is uploaded, and ``describe`` shows an adaptive job's settings and live state."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from task_helpers import Bench, hold_trainers

from paddlecloud.api.adaptive import AdaptiveReport
from paddlecloud.cli import jobs as cli_jobs
from paddlecloud.cli.batch import batch_spec
from paddlecloud.cli.main import cli

pytestmark = pytest.mark.timeout(60)


def opts(**given: Any) -> dict[str, Any]:
    return {"batch_size": None, "adaptive_batch": None, "lr_rule": None, "other": 1} | given


@pytest.mark.parametrize(
    ("given", "spec"),
    [
        ({}, None),
        ({"batch_size": 64}, {"size": 64}),
        ({"batch_size": 64, "adaptive_batch": "32:1024"}, {"size": 64, "adaptive": {"min": 32, "max": 1024}}),
        (
            {"batch_size": 8, "adaptive_batch": " 8 : 8 ", "lr_rule": "linear"},
            {"size": 8, "adaptive": {"min": 8, "max": 8}, "lr_rule": "linear"},
        ),
    ],
)
def test_batch_options_become_the_spec(given: dict[str, Any], spec: dict[str, Any] | None) -> None:
    o = opts(**given)
    assert batch_spec(o) == spec
    assert o == {"other": 1}


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"batch_size": 64, "adaptive_batch": "8:4"}, "min <= max, got 8:4"),
        ({"batch_size": 64, "adaptive_batch": "x"}, "'x' is not MIN:MAX"),
        ({"batch_size": 64, "adaptive_batch": "32:"}, "is not MIN:MAX"),
        ({"batch_size": 64, "adaptive_batch": "-1:8"}, "is not MIN:MAX"),
        ({"batch_size": 16, "adaptive_batch": "32:64"}, "within the adaptive bounds 32:64"),
        ({"batch_size": 0}, "greater than or equal to 1"),
        ({"batch_size": 2**25}, "less than or equal to 16777216"),
        ({"adaptive_batch": "8:64"}, "needs --batch-size"),
        ({"batch_size": 64, "lr_rule": "sqrt"}, "--lr-rule needs --adaptive-batch-size"),
        ({"lr_rule": "sqrt"}, "--lr-rule needs --adaptive-batch-size"),
    ],
)
def test_bad_batch_options_are_usage_errors(given: dict[str, Any], words: str) -> None:
    with pytest.raises(click.UsageError) as err:
        batch_spec(opts(**given))
    assert words in err.value.format_message()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--batch-size", "64", "--adaptive-batch-size", "8:4"], "min <= max"),
        (["--batch-size", "x"], "'x' is not a valid integer"),
        (["--batch-size", "64", "--adaptive-batch-size", "8:64", "--lr-rule", "cubic"], "--lr-rule"),
    ],
)
def test_submit_refuses_them_before_uploading(tmp_path: Path, args: list[str], words: str) -> None:
    (tmp_path / "main.py").write_text("print(1)\n")
    r = CliRunner().invoke(cli, ["submit", str(tmp_path), "--entry", "python main.py", *args])
    assert r.exit_code == 2, r.output
    assert words in r.output


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    b = Bench(tmp_path)
    yield b
    b.close()


def test_describe_shows_the_settings_and_the_live_state(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = bench.user("alice")
    batch = {"size": 64, "adaptive": {"min": 32, "max": 1024}, "lr_rule": "adascale"}
    bench.submit(alice, "ada", {"items": ["a"]}, batch=batch)
    bench.submit(alice, "fixed", {"items": ["a"]}, batch={"size": 128})
    report = {
        "replicas": 2, "local_bsz": 32.0, "step_time_s": 0.25, "grad_sqr": 4.0, "grad_var": 80.0,
        "lr_gain": 1.5, "batch_size": 64,
    }  # fmt: skip
    hold_trainers(bench.platform, "alice", "ada", 2)  # a report is fitted at the trainers the job holds
    bench.worker("alice", "ada").adaptive_report("ada", AdaptiveReport.model_validate(report))
    monkeypatch.setattr(cli_jobs, "Client", lambda: alice)
    r = CliRunner().invoke(cli, ["describe", "ada"], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "Batch:      64, adaptive 32..1024, lr rule adascale" in r.output
    assert (
        "Adaptive:   global batch 64 (not started yet); noise scale 1,280, lr gain 1.5, step time 0.25 s "
        "(1 reports)" in r.output
    )
    r = CliRunner().invoke(cli, ["describe", "fixed"], terminal_width=200)
    assert "Batch:      128 (fixed)" in r.output and "Adaptive:" not in r.output
    r = CliRunner().invoke(cli, ["describe", "ada", "-o", "json"])
    assert '"noise_scale": 1280.0' in r.output
