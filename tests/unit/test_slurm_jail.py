"""The Slurm backend's node-side jail (``backends/slurm/jail.py``) without a Slurm cluster.

What the batch script runs is run here as a plain process, as Slurm would start it on a node: the
spec the server writes, read back; the launcher in the local backend's bubblewrap jail (its owner's
home read-write, nothing else of the data dir, uid 1000, its own host name, the exit status
written); a spec that is not one, a home that became a link and a node without bubblewrap each fail
the worker with exit status 126 and the reason in its log. The sandboxed worker on the real cluster:
``tests/slurm/test_confinement.py``. And ``up --backend slurm --isolation``: the settings, the
confinement the backend declares per mode, ``sandbox`` refused without bubblewrap.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from paddlecloud.backends.errors import IsolationError
from paddlecloud.backends.local.envs import install_runtime_shim
from paddlecloud.backends.local.sandbox import JobJail, WorkerDirs, choose, worker_base_env
from paddlecloud.backends.options import OptionError
from paddlecloud.backends.slurm import SlurmBackend, SlurmSettings
from paddlecloud.backends.slurm.jail import CANNOT_CONFINE, JailSpec, SpecError, main

PROGRAM = r"""
import json, os, socket
from pathlib import Path
home, secret = os.environ["HOME_DIR"], os.environ["SECRET"]
Path(home, "from-job.txt").write_text("written")
try:
    Path(secret).read_text()
    seen = "read"
except OSError as exc:
    seen = type(exc).__name__
print("RESULT " + json.dumps({"uid": os.getuid(), "host": socket.gethostname(), "secret": seen}), flush=True)
"""


@pytest.fixture
def node(tmp_path: Path) -> dict[str, Path]:
    """A data dir on the "shared directory": alice's home, bob's secret, a worker's folders."""
    places = {name: tmp_path / "data" / sub for name, sub in (
        ("home", "pfs/home/alice"), ("bob", "pfs/home/bob"), ("cwd", "slurm/jobs/alice/j/workers/trainer-0"),
        ("status", "slurm/jobs/alice/j/run/trainer-0.0"), ("tmp", "slurm/jobs/alice/j/tmp/trainer-0"),
    )}  # fmt: skip
    for path in places.values():
        path.mkdir(parents=True)
    (places["bob"] / "secret.txt").write_text("bob's secret")
    (places["cwd"] / "main.py").write_text(PROGRAM)
    places["shim"] = install_runtime_shim(tmp_path / "data" / "slurm" / "pythonpath")
    places["spec"] = tmp_path / "data" / "slurm" / "jobs" / "alice" / "j" / "run" / "trainer-0.0.jail.json"
    return places


def _spec(node: dict[str, Path]) -> JailSpec:
    box, isolation = choose("sandbox", node["shim"], gpus=False)
    assert box is not None, isolation
    jail = JobJail(box, "alice", Path(sys.prefix), (("--bind-fd", node["home"], True),))
    dirs = WorkerDirs(cwd=node["cwd"], status=node["status"], tmp=node["tmp"], hostname="trainer-0-abcd1234")
    launcher = ["-m", "paddlecloud.runtime.launcher", "--status", str(node["status"] / "exit.json"),
                "--cwd", str(node["cwd"]), "python main.py"]  # fmt: skip
    return JailSpec.of(jail, dirs, launcher, gpus=False)


def _run_on_node(node: dict[str, Path], path: str | None = None) -> subprocess.CompletedProcess[str]:
    """What the batch script runs, with the environment the backend exports to it."""
    env = worker_base_env(
        os.environ, (), sandboxed=True, env_dir=Path(sys.prefix), shim=node["shim"], user="alice"
    )
    env.update(HOME_DIR=str(node["home"]), SECRET=str(node["bob"] / "secret.txt"))
    if path is not None:
        env["PATH"] = path
    argv = [sys.executable, "-I", "-m", "paddlecloud.backends.slurm.jail", str(node["spec"])]
    return subprocess.run(
        argv, env=env, cwd=node["cwd"], capture_output=True, text=True, timeout=60, check=False
    )


def _status(node: dict[str, Path]) -> int:
    code: int = json.loads((node["status"] / "exit.json").read_text())["exit_code"]
    return code


def test_the_spec_is_read_back_as_written(node: dict[str, Path]) -> None:
    spec = _spec(node)
    spec.write(node["spec"])
    assert JailSpec.read(node["spec"]) == spec
    assert spec.data == (("--bind-fd", str(node["home"]), True),) and spec.userns


def test_the_worker_runs_confined_on_its_node(node: dict[str, Path]) -> None:
    _spec(node).write(node["spec"])
    proc = _run_on_node(node)
    assert proc.returncode == 0, proc.stderr
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    assert result == {"uid": 1000, "host": "trainer-0-abcd1234", "secret": "FileNotFoundError"}
    assert (node["home"] / "from-job.txt").read_text() == "written"
    assert _status(node) == 0


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ("not json", "Expecting value"),
        ('{"version": 2}', "not a version 1 jail spec"),
        ('{"version": 1, "data": [], "user": 7}', "'user' is not a string"),
    ],
)
def test_a_spec_that_is_not_one_fails_the_worker(node: dict[str, Path], raw: str, error: str) -> None:
    node["spec"].write_text(raw)
    with pytest.raises(SpecError, match=error):
        JailSpec.read(node["spec"])
    assert main([str(node["spec"])]) == CANNOT_CONFINE


def test_a_bind_that_is_not_a_list_of_places_is_refused(node: dict[str, Path]) -> None:
    raw = json.loads(json.dumps({"version": 1, **_spec(node).__dict__}))
    raw["data"] = [["--bind", "/", True]]
    with pytest.raises(SpecError, match="'data' is not a list of \\[--bind-fd"):
        JailSpec.from_dict(raw)


def test_a_home_that_became_a_link_fails_the_worker_with_the_reason(node: dict[str, Path]) -> None:
    _spec(node).write(node["spec"])
    node["home"].rmdir()
    node["home"].symlink_to(node["bob"])  # planted by an earlier job: never followed
    proc = _run_on_node(node)
    assert proc.returncode == CANNOT_CONFINE and "is a symbolic link" in proc.stderr, proc.stderr
    assert _status(node) == CANNOT_CONFINE
    assert not (node["bob"] / "from-job.txt").exists()


def test_a_node_without_bubblewrap_fails_the_worker_with_the_reason(node: dict[str, Path]) -> None:
    _spec(node).write(node["spec"])
    proc = _run_on_node(node, path=str(node["tmp"]))  # no bwrap on this PATH
    assert proc.returncode == CANNOT_CONFINE, proc.stderr
    assert "bubblewrap is not installed on node" in proc.stderr and _status(node) == CANNOT_CONFINE


def test_the_node_side_imports_only_the_sandbox() -> None:
    """Each worker start pays for the jail's imports: not the backends' contract, Pydantic, ...;
    only the sandbox (and the GPU driver's binds it makes for runs in an image: ``gpu_driver``), the
    backends' error classes (standard library only: ``IsolationError``) and the node's keeping of
    the run (``nodekeep``: ``paddlecloud.node``)."""
    code = (
        "import sys, paddlecloud.backends.slurm.jail\n"
        "print(sorted(m for m in sys.modules if 'pydantic' in m or m.startswith('paddlecloud.backends.')))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == str(
        ["paddlecloud.backends.errors", "paddlecloud.backends.local", "paddlecloud.backends.local.gpu_driver",
         "paddlecloud.backends.local.sandbox",
         "paddlecloud.backends.options",
         "paddlecloud.backends.slurm", "paddlecloud.backends.slurm.jail",
         "paddlecloud.backends.slurm.nodekeep"]
    )  # fmt: skip


# -- up --backend slurm --isolation ---------------------------------------------------------------


def test_isolation_settings() -> None:
    assert SlurmSettings.from_options({}).isolation == "auto"
    assert SlurmSettings.from_options({"isolation": "none"}).isolation == "none"
    with pytest.raises(OptionError, match="'strict': expected auto, sandbox, none") as err:
        SlurmSettings.from_options({"isolation": "strict"})
    assert err.value.option == "--isolation"


def test_the_declared_confinement_per_mode(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def backend(mode: str) -> SlurmBackend:
        return SlurmBackend(SlurmSettings(root=tmp_path / "slurm", isolation=mode), lambda: 0.0, lambda: None)

    sandboxed = backend("sandbox").confinement()
    assert sandboxed.confined and "bubblewrap" in sandboxed.description
    assert "Slurm node, which needs bubblewrap" in sandboxed.description
    unconfined = backend("none").confinement()
    assert not unconfined.confined and "asked for with --isolation none" in unconfined.description
    monkeypatch.setenv("PATH", str(tmp_path))  # no bubblewrap on the server's host
    with pytest.raises(IsolationError, match="--isolation sandbox: bubblewrap is not installed"):
        backend("sandbox")
    auto = backend("auto").confinement()
    assert not auto.confined and "bubblewrap is not installed" in auto.description
