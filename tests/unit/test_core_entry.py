"""core.entry.entry_problem: does the entry command name a file the package has?"""

from __future__ import annotations

import pytest

from paddlecloud.core.entry import entry_problem

FILES = ["train.py", "x.py", "run.sh", "bin/start", "pkg/__init__.py"]


@pytest.mark.parametrize(
    "entry",
    [
        "python train.py",
        "python3 train.py --epochs 3",
        "python3.11 train.py",
        "/usr/bin/python train.py",
        "python -u x.py",
        "python ./train.py",
        "python -m pkg",
        "python -c 'print(1)'",
        "python",
        "sleep 30",
        "echo hello",
        "./run.sh",
        "bash run.sh",
        "sh run.sh",
        "bash -c 'python nothere.py'",
        "./bin/start",
        "/opt/tool/run",
        "python /abs/train.py",
        "python $HOME/train.py",
    ],
)
def test_entries_without_problems(entry: str) -> None:
    assert entry_problem(entry, FILES) is None


@pytest.mark.parametrize(
    ("entry", "script"),
    [
        ("python missing.py", "missing.py"),
        ("python -u missing.py", "missing.py"),
        ("python3 sub/train.py", "sub/train.py"),
        ("./missing.sh", "./missing.sh"),
        ("bash missing.sh", "missing.sh"),
        ("sh -e missing.sh", "missing.sh"),
        ("python ../train.py", "../train.py"),
    ],
)
def test_missing_script_is_named(entry: str, script: str) -> None:
    problem = entry_problem(entry, FILES)
    assert problem is not None
    assert f"runs {script}," in problem
    assert "not in the package" in problem
    assert "train.py" in problem  # lists what the package has


def test_empty_package_says_so() -> None:
    problem = entry_problem("python train.py", [])
    assert problem is not None and "no files" in problem


def test_long_file_list_is_shortened() -> None:
    files = [f"f{i}.py" for i in range(20)]
    problem = entry_problem("python train.py", files)
    assert problem is not None and problem.endswith("...)")
    assert "f19.py" not in problem


@pytest.mark.parametrize(
    ("entry", "match"),
    [("python 'train.py", "not a valid command line"), ('bash "run.sh', "not a valid command line")],
)
def test_unbalanced_quotes(entry: str, match: str) -> None:
    problem = entry_problem(entry, FILES)
    assert problem is not None and match in problem


@pytest.mark.parametrize("entry", ["", "   "])
def test_empty_entry(entry: str) -> None:
    assert entry_problem(entry, FILES) == "entry is empty"


@pytest.mark.parametrize("entry", ["python -W ignore train.py", "python3 -X dev train.py"])
def test_interpreter_options_with_an_argument_are_skipped(entry: str) -> None:
    assert entry_problem(entry, FILES) is None
