"""The runtime shim (``install_runtime_shim``): the copy of ``paddlecloud.runtime`` that workers import
their launcher from. Every new backend installs it again, also while workers of the jobs it adopts
start (a server restart; on Slurm a worker's job starts whenever Slurm runs it), so installing it
again never takes a file away: an identical copy is left untouched, a stale one is brought up to date
file by file, each file replaced whole."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import paddlecloud.runtime as runtime_pkg
from paddlecloud.backends.local.envs import install_runtime_shim

RUNTIME = Path(runtime_pkg.__file__).parent


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``root``: its inode and modification time (what a rewrite changes)."""
    return {
        str(p.relative_to(root)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in root.rglob("*")
        if p.is_file()
    }


def test_installing_it_again_leaves_an_identical_copy_untouched(tmp_path: Path) -> None:
    shim = install_runtime_shim(tmp_path / "pythonpath")
    before = _files(shim)
    assert "paddlecloud/runtime/launcher.py" in before and "paddlecloud/__init__.py" in before
    install_runtime_shim(shim)  # a new backend on the same directory: a server restart
    assert _files(shim) == before  # not one file deleted, rewritten or replaced


def test_a_stale_copy_is_brought_up_to_date_file_by_file(tmp_path: Path) -> None:
    shim = install_runtime_shim(tmp_path / "pythonpath")
    runtime = shim / "paddlecloud" / "runtime"
    (runtime / "launcher.py").write_text("# an older platform's launcher\n")
    (runtime / "endpoints.py").unlink()
    (runtime / "retired.py").write_text("# a module this runtime no longer has\n")
    (runtime / "__pycache__").mkdir(exist_ok=True)
    (runtime / "__pycache__" / "membership.cpython-311.pyc").write_bytes(b"compiled by a worker")
    untouched = (runtime / "membership.py").stat().st_ino
    install_runtime_shim(shim)
    for name in ("launcher.py", "endpoints.py"):
        assert (runtime / name).read_bytes() == (RUNTIME / name).read_bytes()
    assert not (runtime / "retired.py").exists()
    assert (runtime / "membership.py").stat().st_ino == untouched
    assert (runtime / "__pycache__" / "membership.cpython-311.pyc").exists()  # Python's, left alone
    assert not [p for p in shim.rglob("*.part")]  # no half-written file left behind


def test_workers_import_the_launcher_and_torchruns_entry_point_from_it(tmp_path: Path) -> None:
    shim = install_runtime_shim(tmp_path / "pythonpath")
    install_runtime_shim(shim)
    probe = (
        "import importlib.metadata as m, paddlecloud.runtime.launcher as launcher; print(launcher.__file__); "
        "print([e.value for d in m.distributions(path=[sys.argv[1]]) for e in d.entry_points])"
    )
    env = {**os.environ, "PYTHONPATH": str(shim)}
    out = subprocess.run(
        [sys.executable, "-c", f"import sys; {probe}", str(shim)], env=env, capture_output=True, text=True,
        check=True, cwd=tmp_path,
    ).stdout.splitlines()  # fmt: skip
    assert out[0] == str(shim / "paddlecloud" / "runtime" / "launcher.py")
    assert out[1] == "['paddlecloud.runtime.torchelastic:handler_creator']"
