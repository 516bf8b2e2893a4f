"""The task master's CLI pieces: submit's task options become the JobSpec ``tasks`` field; the
summary line of ``get tasks`` / ``describe``; usage errors exit 2 before anything is uploaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from paddlecloud.api.tasks import TaskSummary
from paddlecloud.cli.main import cli
from paddlecloud.cli.tasks import summary_line, task_spec


def opts(**given: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "tasks_from_input": False, "task_items": (), "task_pattern": None, "task_chunk_size": None,
        "passes": None, "task_timeout": None, "task_max_failures": None, "other": 1,
    }  # fmt: skip
    return base | given


@pytest.mark.parametrize(
    ("given", "spec"),
    [
        ({}, None),
        ({"tasks_from_input": True}, {}),
        (
            {"tasks_from_input": True, "task_pattern": "part-*", "task_chunk_size": "64Mi", "passes": 5},
            {"pattern": "part-*", "chunk_size": "64Mi", "num_passes": 5},
        ),
        ({"task_items": ("a", "b"), "task_timeout": 10.0}, {"items": ["a", "b"], "lease_timeout": 10.0}),
        ({"tasks_from_input": True, "task_max_failures": 1}, {"max_failures": 1}),
    ],
)
def test_task_options_become_the_spec(given: dict[str, Any], spec: dict[str, Any] | None) -> None:
    o = opts(**given)
    assert task_spec(o) == spec
    assert o == {"other": 1}  # the task options are taken out


@pytest.mark.parametrize(
    "given",
    [{"passes": 3}, {"tasks_from_input": True, "task_items": ("a",)}],
    ids=["tuning-without-a-source", "both-sources"],
)
def test_inconsistent_task_options_are_usage_errors(given: dict[str, Any]) -> None:
    with pytest.raises(click.UsageError):
        task_spec(opts(**given))


def test_submit_refuses_them_before_uploading(tmp_path: Path) -> None:
    (tmp_path / "main.py").write_text("print(1)\n")
    r = CliRunner().invoke(cli, ["submit", str(tmp_path), "--entry", "python main.py", "--passes", "2"])
    assert r.exit_code == 2
    assert "--tasks-from-input or --task" in r.output


def test_summary_line() -> None:
    s = TaskSummary(total=8, todo=3, leased=2, done=3, failed=0, pass_no=1, num_passes=5, finished=False,
                    lease_timeout=30.0, max_failures=3)  # fmt: skip
    assert (
        summary_line(s)
        == "pass 2/5: 8 tasks, 3 done, 2 leased, 3 todo, 0 failed (lease 30s, 3 failures allowed)"
    )
    assert summary_line(s.model_copy(update={"finished": True})).startswith("finished: 8 tasks")
