"""The paper's load-2.0 Pollux workloads kept in ``bench/data``, checked against the shared data.

The shared folder (``../shared/data/pollux``) has the 0.5 / 1.0 / 1.5 sets and the paper's results at
every load, but not the 2.0 workloads; ``bench/data/pollux-workloads-2.0`` holds them (see
``bench/data/README.md``). These tests hold the files to what the shared data says about them, so a
damaged or hand-edited file fails: the job names are the paper's 2.0 results' names, every lower
load's set is a subset of the 2.0 set row for row, rows are named and ordered by submit time, and
each (application, replicas) pair has the batch the other sets give it.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from paddlecloud.sim import load_pollux

ROOT = Path(__file__).resolve().parents[2]
POLLUX = ROOT.parent / "shared" / "data" / "pollux"
LOAD2 = ROOT / "bench" / "data" / "pollux-workloads-2.0"
LOWER = ("workloads-0.5", "workloads", "workloads-1.5")
WORKLOADS = range(1, 9)

Row = tuple[str, str, str, str]


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def _key(r: dict[str, str]) -> Row:
    return (r["time"], r["application"], r["num_replicas"], r["batch_size"])


@pytest.fixture(scope="module")
def paper_names() -> dict[str, list[str]]:
    assert POLLUX.is_dir(), f"shared data missing: {POLLUX}"
    with (POLLUX / "results-jobload" / "pollux-2.0" / "summary.json").open() as f:
        return {w: list(jobs) for w, jobs in json.load(f)["jcts"].items()}


@pytest.fixture(scope="module")
def batches() -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for folder in LOWER:
        for k in WORKLOADS:
            for r in _rows(POLLUX / folder / f"workload-{k}.csv"):
                out.setdefault((r["application"], r["num_replicas"]), set()).add(r["batch_size"])
    return out


@pytest.mark.parametrize("k", WORKLOADS)
def test_names_are_the_papers(k: int, paper_names: dict[str, list[str]]) -> None:
    rows = _rows(LOAD2 / f"workload-{k}.csv")
    assert len(rows) == 320
    assert sorted(r["name"] for r in rows) == sorted(paper_names[f"workload-{k}"])


@pytest.mark.parametrize("k", WORKLOADS)
def test_lower_loads_are_subsets(k: int) -> None:
    rows = {_key(r) for r in _rows(LOAD2 / f"workload-{k}.csv")}
    sizes = []
    for folder in LOWER:
        lower = [_key(r) for r in _rows(POLLUX / folder / f"workload-{k}.csv")]
        assert set(lower) <= rows, f"{folder}/workload-{k}.csv has rows the 2.0 set lacks"
        sizes.append(len(lower))
    assert sizes == [80, 160, 240]


@pytest.mark.parametrize("k", WORKLOADS)
def test_rows_named_ordered_and_batched(k: int, batches: dict[tuple[str, str], set[str]]) -> None:
    rows = _rows(LOAD2 / f"workload-{k}.csv")
    times = [int(r["time"]) for r in rows]
    assert times == sorted(times)
    for i, r in enumerate(rows):
        assert r["name"] == f"{r['application']}-{i}"
        assert r["batch_size"] in batches[r["application"], r["num_replicas"]], r


def test_loader_reads_them() -> None:
    jobs = load_pollux(LOAD2 / "workload-3.csv")
    assert len(jobs) == 320 and {j.app for j in jobs} == {
        "bert",
        "cifar10",
        "deepspeech2",
        "imagenet",
        "ncf",
        "yolov3",
    }
