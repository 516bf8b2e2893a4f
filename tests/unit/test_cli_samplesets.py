"""The SampleSet commands (cli/samplesets.py) against an in-process platform on the memory backend.

``main()`` runs as the console script would, with the SDK client bound to the ASGI app: refusals are
one ``error:`` line and a non-zero exit; listings carry the documented fields; SampleJobs show
their phase and progress.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from memory_platform import GI, MemoryWorld

from paddlecloud.backends.base import NodeInfo
from paddlecloud.cli.main import main
from paddlecloud.core.resources import Resources

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[MemoryWorld]:
    w = MemoryWorld(tmp_path, nodes=(NodeInfo("mem-0", Resources(4000, 8 * GI)),))
    token = w.platform.ensure_user("alice")
    alice = w.client("alice")
    assert token  # the client above rotated nothing: ensure_user is idempotent per call
    monkeypatch.setattr("paddlecloud.cli.samplesets.Client", lambda: alice)
    monkeypatch.setattr("paddlecloud.cli.jobs.Client", lambda: alice)
    files = w.platform.files
    root = files.local_path(files.parse("/pfs/local/home/alice/data"))
    assert root is not None
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("hello\n")
    (root / "sub" / "b.txt").write_text("world\n")
    yield w
    w.close()


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def one_error(err: str) -> str:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_create_list_describe_and_jobs(world: MemoryWorld, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "sampleset", "create", "mnist", "--source", "/pfs/local/home/alice/data")
    assert code == 0 and "sampleset mnist created, Pending" in out
    for _ in range(6):
        world.platform.sampleset_loop.tick()
    code, out, _ = run(capsys, "get", "samplesets", "-o", "json")
    item = json.loads(out)["items"][0]
    assert code == 0
    assert {k: item[k] for k in ("name", "phase", "files", "bytes")} == {
        "name": "mnist", "phase": "Ready", "files": 2, "bytes": 12,
    }  # fmt: skip
    assert item["cached_bytes"] == 12 and item["nodes"][0]["node"] == "mem-0"
    code, out, _ = run(capsys, "get", "samplesets")
    assert code == 0 and "mnist" in out and "Ready" in out and "1/1" in out
    code, out, _ = run(capsys, "sampleset", "jobs", "mnist")
    assert code == 0 and out.count("Succeeded") == 2 and "100%" in out and "━" in out
    code, out, _ = run(capsys, "describe", "sampleset", "mnist")
    assert code == 0 and "Phase:      Ready" in out and "mem-0" in out and "warmup" in out
    code, out, _ = run(capsys, "sampleset", "rmr", "mnist", "sub")
    assert code == 0 and "rmr sub queued as job 3" in out
    code, out, _ = run(capsys, "sampleset", "delete", "mnist")
    assert code == 0 and "being deleted" in out


@pytest.mark.parametrize(
    ("args", "words", "exit_code"),
    [
        (["sampleset", "rmr", "mnist", "../etc"], "rmr path '../etc' holds \"..\"", 1),
        (["sampleset", "rmr", "mnist", "/etc"], "is absolute", 1),
        (["sampleset", "sync", "nope"], "SampleSet 'nope' not found", 1),
        (["describe", "sampleset", "nope"], "SampleSet 'nope' not found", 1),
        (["sampleset", "create", "Bad_Name", "--source", "/pfs/local/home/alice/data"], "name", 1),
        (["sampleset", "create", "x", "--source", "/pfs/local/home/alice/data/a.txt"], "is a file", 1),
        (["sampleset", "create", "x", "--source", "/pfs/local/home/bob"], "not yours", 1),
        (["sampleset", "create", "mnist", "--source", "/pfs/local/home/alice/data"], "already exists", 1),
        (["describe", "a", "b"], "describe takes one job name", 2),
        (["sampleset", "rmr", "mnist"], "Missing argument 'PATH'", 2),
    ],
)
def test_refusals_are_one_error_line_and_a_non_zero_exit(
    world: MemoryWorld, capsys: pytest.CaptureFixture[str], args: list[str], words: str, exit_code: int
) -> None:
    assert run(capsys, "sampleset", "create", "mnist", "--source", "/pfs/local/home/alice/data")[0] == 0
    code, _out, err = run(capsys, *args)
    line = one_error(err)
    assert code == exit_code and words in line, line
