"""Mutation score of the unit tests over the scheduler, the PFS store, core and the task master.

mutmut (pinned in the ``mutation`` dependency group of pyproject.toml, not in ``dev``) changes one
thing at a time in the code (an operator, a constant, a dropped call...) and runs the tests that
cover the function it changed; a mutant the tests do not notice *survived*. For each package the
script exports the tree of ``--ref`` (``git archive``: src/, tests/, pyproject.toml) into a work
dir of its own, adds a ``[tool.mutmut]`` section naming the package's files and its fast unit tests
(never e2e), runs mutmut there and prints killed / survived / timeout / no tests / total per
package, then the diffs of some surviving mutants.

    .venv/bin/pip install --group mutation            # mutmut; once
    .venv/bin/python bench/mutation.py [--ref HEAD] [--package scheduler storage core tasks]
                                       [--sample 60] [--seed 1] [--jobs 2] [--survivors 8]

``--sample N`` tests N mutants per package drawn with ``random.Random(seed)`` (0: all of them);
mutmut still generates every mutant and runs the package's tests once to learn which test covers
which function. Every mutant and every test of it runs in a process forked from one that has
already imported pytest, so a mutant costs only its covering tests. Run from the repository root;
the ref must be committed (``git archive`` reads commits, not the working tree).
"""

from __future__ import annotations

import argparse
import dataclasses
import fnmatch
import json
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATUSES = ("killed", "survived", "timeout", "no tests", "other")


@dataclasses.dataclass(frozen=True)
class Package:
    mutate: tuple[str, ...]  # globs of the files mutmut changes
    tests: tuple[str, ...]  # globs of their fast unit tests (those present at the ref are used)


PACKAGES = {
    "scheduler": Package(("src/paddlecloud/scheduler/*.py",), ("tests/unit/test_scheduler_*.py",)),
    "storage": Package(
        ("src/paddlecloud/storage/*.py",),
        ("tests/unit/test_pfs_store.py", "tests/unit/test_durability.py", "tests/unit/test_pfs_full_disk.py"),
    ),
    # core/tasks.py belongs to the task master below (each file is mutated once)
    "core": Package(
        ("src/paddlecloud/core/*.py",), ("tests/unit/test_core_*.py", "tests/unit/test_pfs_paths.py")
    ),
    "tasks": Package(
        ("src/paddlecloud/controller/services/tasks.py", "src/paddlecloud/core/tasks.py"),
        ("tests/unit/test_task_master*.py", "tests/unit/test_core_tasks.py"),
    ),
}
EXCLUDE = {"core": ("src/paddlecloud/core/tasks.py",)}
#: mutmut's run ends with an assertion when asked for mutants that match nothing; after it has
#: generated every mutant and collected which tests cover what. The sampled run uses that.
_GENERATE_ONLY = "paddlecloud.__generate_only__"


def export(ref: str, dest: Path) -> list[str]:
    """The tree of ``ref`` under ``dest``; returns its file names."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref, "src", "tests", "pyproject.toml"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return [str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file()]


def configure(dest: Path, name: str, files: list[str]) -> list[str]:
    """Append the package's ``[tool.mutmut]`` section; returns the test files selected."""
    pkg = PACKAGES[name]
    tests = sorted({f for f in files for g in pkg.tests if fnmatch.fnmatch(f, g)})
    if not tests:
        raise SystemExit(f"{name}: none of {pkg.tests} exists at this ref")
    section = {
        "source_paths": ["src"],
        "only_mutate": list(pkg.mutate),
        "do_not_mutate": ["*/__init__.py", *EXCLUDE.get(name, ())],
        "pytest_add_cli_args_test_selection": tests,
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-q"],
        "use_git_change_detection": False,
    }
    lines = ["", "[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in section.items()]
    with open(dest / "pyproject.toml", "a") as f:
        f.write("\n".join(lines) + "\n")
    return tests


def mutmut(dest: Path, *args: str, check: bool = True) -> str:
    exe = Path(sys.executable).with_name("mutmut")
    proc = subprocess.run([str(exe), *args], cwd=dest, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        sys.stdout.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"mutmut {' '.join(args[:2])} failed in {dest} (exit {proc.returncode})")
    return proc.stdout + proc.stderr


def results(dest: Path) -> dict[str, str]:
    """mutant name -> status, for every mutant mutmut generated."""
    out = mutmut(dest, "results", "--all", "true")
    return dict(m.groups() for m in re.finditer(r"^\s*(\S+__mutmut_\d+): (.+?)\s*$", out, re.M))


def run_package(name: str, args: argparse.Namespace, work: Path) -> tuple[dict[str, int], list[str], float]:
    dest = work / name
    start = time.monotonic()
    tests = configure(dest, name, export(args.ref, dest))
    print(f"{name}: {len(tests)} test files: {' '.join(Path(t).name for t in tests)}", flush=True)
    jobs = f"--max-children={args.jobs}"
    if args.sample:
        out = mutmut(dest, "run", jobs, _GENERATE_ONLY, check=False)
        every = sorted(results(dest))
        if not every:
            sys.stdout.write(out[-4000:])
            raise SystemExit(f"{name}: mutmut generated no mutants")
        chosen = sorted(random.Random(args.seed).sample(every, min(args.sample, len(every))))
        print(f"{name}: {len(every)} mutants, testing {len(chosen)} (seed {args.seed})", flush=True)
        mutmut(dest, "run", jobs, *chosen)
    else:
        mutmut(dest, "run", jobs)
        chosen = sorted(results(dest))
    status = results(dest)
    counts = dict.fromkeys(STATUSES, 0)
    survivors = []
    for m in chosen:
        s = status.get(m, "other")
        counts[s if s in counts else "other"] += 1
        if s == "survived":
            survivors.append(m)
    counts["total"] = len(chosen)
    return counts, survivors, time.monotonic() - start


def show(dest: Path, names: list[str]) -> None:
    for m in names:
        diff = mutmut(dest, "show", m, check=False)
        print("\n".join(line for line in diff.splitlines() if line.strip()))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ref", default="HEAD", help="the commit whose code and tests are measured")
    p.add_argument("--package", nargs="+", choices=sorted(PACKAGES), default=list(PACKAGES))
    p.add_argument("--sample", type=int, default=0, help="mutants per package (0: all)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=2, help="mutants tested at once")
    p.add_argument("--survivors", type=int, default=8, help="surviving mutants shown per package")
    p.add_argument("--workdir", type=Path, help="keep the work dirs here (default: a temp dir, removed)")
    args = p.parse_args()
    if shutil.which("mutmut", path=str(Path(sys.executable).parent)) is None:
        raise SystemExit("mutmut is not installed: .venv/bin/pip install --group mutation")
    sha = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", args.ref], check=True, capture_output=True, text=True
    ).stdout.strip()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="paddlecloud-mutation-"))
    rows = []
    try:
        for name in args.package:
            counts, survivors, took = run_package(name, args, work / sha)
            rows.append((name, counts, took))
            print(f"{name}: {counts} in {took:.0f} s", flush=True)
            if survivors and args.survivors:
                print(f"--- {name}: {min(args.survivors, len(survivors))} of {len(survivors)} survivors")
                show(work / sha / name, survivors[: args.survivors])
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    sampled = f"{args.sample} sampled per package, seed {args.seed}" if args.sample else "every mutant"
    print(f"\nmutation score at {args.ref} ({sha}), {sampled}; score = killed+timeout / total")
    print(f"{'package':<10} {'killed':>7} {'survived':>9} {'timeout':>8} {'no tests':>9} {'total':>6} "
          f"{'score':>6} {'time':>7}")  # fmt: skip
    for name, c, took in rows:
        score = (c["killed"] + c["timeout"]) / c["total"] if c["total"] else 0.0
        print(
            f"{name:<10} {c['killed']:>7} {c['survived']:>9} {c['timeout']:>8} {c['no tests']:>9} "
            f"{c['total']:>6} {score:>6.1%} {took:>6.0f}s"
        )


if __name__ == "__main__":
    main()
