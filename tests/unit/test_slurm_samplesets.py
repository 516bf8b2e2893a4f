"""SampleSets on the Slurm backend without a Slurm cluster (the lifecycle on the real cluster:
``tests/slurm/test_samplesets.py``).

What a worker of a job with a SampleSet is submitted as (the node side mounts it for the run
before the launcher or the sandbox starts; the sandbox binds it read-only; the worker stays pinned
to the node the scheduler chose), what a node job is submitted as, the per-node caches in status
from the nodes' reports, the node side's run folders (stale ones swept, live ones kept) and hard-
linked caches, a machine without FUSE (refused at once on the server, a clear exit status on a
node, never a hang), and the ``--slurm-node-cache`` setting.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import signal
import sys
import time
from pathlib import Path

import pytest

from paddlecloud.backends.base import RENDEZVOUS, JobLaunch
from paddlecloud.backends.local.envs import install_runtime_shim
from paddlecloud.backends.local.sandbox import choose
from paddlecloud.backends.options import OptionError
from paddlecloud.backends.samplesets import SAMPLESET_DIR_ENV, SampleSetRef, SampleSetsUnavailable
from paddlecloud.backends.slurm.jail import JailSpec
from paddlecloud.backends.slurm.job_record import JobRecord, WorkerRecord
from paddlecloud.backends.slurm.samplenode import CANNOT_MOUNT, NodePaths, _own_run, main
from paddlecloud.backends.slurm.samplesets import SlurmSampleSets
from paddlecloud.backends.slurm.script import BatchScripts, status_file
from paddlecloud.backends.slurm.settings import SlurmSettings
from paddlecloud.core.envcontract import Topology
from paddlecloud.scheduler import WorkerPlacement
from paddlecloud.storage.juicefs import FUSE_DEVICE_ENV, Volume, link_cache

pytestmark = pytest.mark.timeout(60)

MiB = 1 << 20


def _ref(tmp: Path, nodes: tuple[str, ...] = ("n1", "n2")) -> SampleSetRef:
    return SampleSetRef(key="alice/imgs", owner="alice", name="imgs", uid="ss-7", source=tmp / "src",
                        cache_size=64 * MiB, nodes=nodes)  # fmt: skip


def _settings(tmp: Path, **kw: object) -> SlurmSettings:
    return SlurmSettings(root=tmp / "slurm", node_cache=tmp / "local", **kw)  # type: ignore[arg-type]


def _job(tmp: Path, ref: SampleSetRef | None) -> JobRecord:
    launch = JobLaunch(
        key="alice/j", user="alice", name="j", framework="none", entry="python read.py",
        package=tmp / "pkg.tar.gz", output_dir=tmp / "out",
        placement=(WorkerPlacement("trainer", 0, "n2"),), sampleset=ref,
    )  # fmt: skip
    jdir = tmp / "slurm" / "jobs" / "alice" / "j"
    for sub in ("package", "run", "logs", "contract"):
        (jdir / sub).mkdir(parents=True, exist_ok=True)
    workers = {"trainer-0": WorkerRecord("trainer", 0, "n2", 21000)}
    return JobRecord(launch, jdir, workers, (21001, 21002))


def _scripts(tmp: Path, sandboxed: bool) -> BatchScripts:
    settings = _settings(tmp, partition="gpu", account="pc-{user}")
    shim = install_runtime_shim(tmp / "slurm" / "pythonpath")
    box = choose("sandbox", shim, gpus=False)[0] if sandboxed else None
    return BatchScripts(settings, shim, box, SlurmSampleSets(settings, tmp / "slurm" / "samplesets"))


TOPOLOGY = Topology([], ["127.0.0.1:21000"], "127.0.0.1:21001", "127.0.0.1:21002")


def _wrapped(argv: list[str]) -> list[str]:
    wrap = next(a for a in argv if a.startswith("--wrap="))
    return shlex.split(wrap.removeprefix("--wrap=exec "))


@pytest.mark.parametrize("sandboxed", [False, True])
def test_a_worker_mounts_its_sampleset_on_its_planned_node_before_it_starts(
    tmp_path: Path, sandboxed: bool
) -> None:
    if sandboxed and choose("auto", tmp_path, gpus=False)[0] is None:
        pytest.skip("bubblewrap cannot run here")
    scripts, ref = _scripts(tmp_path, sandboxed), _ref(tmp_path)
    job = _job(tmp_path, ref)
    w = job.workers["trainer-0"]
    argv, env = scripts.sbatch(job, w, TOPOLOGY)
    assert "--nodelist=n2" in argv  # the node the scheduler chose (the cache-aware placement)
    mnt = tmp_path / "local" / "runs" / "alice.j.trainer-0.0" / "mnt"
    assert env[SAMPLESET_DIR_ENV] == str(mnt)
    cmd = _wrapped(argv)
    cut = cmd.index("--")
    assert cmd[:5] == [sys.executable, "-I", "-m", "paddlecloud.backends.slurm.samplenode", "run"]
    opts = dict(zip(cmd[5:cut:2], cmd[6:cut:2], strict=True))
    assert opts == {
        "--volume": str(tmp_path / "slurm" / "samplesets" / "ss-7"), "--name": "ss-7",
        "--node-cache": str(tmp_path / "local"), "--cache-size": str(64 * MiB),
        "--run": "alice.j.trainer-0.0", "--status": str(status_file(job, w)),
    }  # fmt: skip
    inner = cmd[cut + 1 :]
    if sandboxed:  # the jail binds the run's mount read-only (WorkerDirs.sampleset)
        assert inner[1:4] == ["-I", "-m", "paddlecloud.backends.slurm.jail"]
        spec = JailSpec.read(Path(inner[4]))
        assert spec.sampleset == str(mnt) and spec.jail(scripts.sandbox)[1].sampleset == mnt  # type: ignore[arg-type]
    else:
        assert inner[1:3] == ["-m", "paddlecloud.runtime.launcher"]


def test_workers_without_a_sampleset_and_the_store_mount_nothing(tmp_path: Path) -> None:
    scripts = _scripts(tmp_path, sandboxed=False)
    job = _job(tmp_path, None)
    argv, env = scripts.sbatch(job, job.workers["trainer-0"], TOPOLOGY)
    assert "samplenode" not in " ".join(argv) and SAMPLESET_DIR_ENV not in env
    job = _job(tmp_path, _ref(tmp_path))
    store = WorkerRecord(RENDEZVOUS, 0, "n1", 21003)
    argv, env = scripts.sbatch(job, store, TOPOLOGY)
    assert "samplenode" not in " ".join(argv) and SAMPLESET_DIR_ENV not in env


def test_node_jobs_run_on_their_node_with_the_site_arguments(tmp_path: Path) -> None:
    settings = _settings(
        tmp_path, partition="gpu", account="pc-{user}", qos="low", sbatch_args=("--time=10",)
    )
    sets = SlurmSampleSets(settings, tmp_path / "slurm" / "samplesets")
    argv = sets.node_job(_ref(tmp_path), "warmup", "n3", ("train/x", "sj-2"), tmp_path / "w.log")
    site = ["--nodelist=n3", "--partition=gpu", "--account=pc-alice", "--qos=low", "--time=10"]
    for arg in [*site, "--ntasks=1", "--cpus-per-task=1", "--no-requeue", f"--output={tmp_path / 'w.log'}"]:
        assert arg in argv
    cmd = _wrapped(argv)
    assert cmd[3:5] == ["paddlecloud.backends.slurm.samplenode", "warmup"]
    assert cmd[cmd.index("--task") + 1] == "sj-2" and cmd[cmd.index("--path") + 1] == "train/x"
    assert "--path" not in _wrapped(
        sets.node_job(_ref(tmp_path), "clear", "n1", ("", "sj-3"), tmp_path / "c")
    )


def test_status_shows_each_nodes_cache_from_its_report(tmp_path: Path) -> None:
    sets = SlurmSampleSets(_settings(tmp_path), tmp_path / "slurm" / "samplesets")
    ref = _ref(tmp_path)
    reports = sets.reports(ref.uid)
    reports.mkdir(parents=True)
    (reports / "n1.json").write_text(json.dumps({"node": "n1", "cached_bytes": 5000}))
    (reports / "n3.json").write_text(json.dumps({"node": "n3", "cached_bytes": 700}))  # a job ran there
    (reports / "n9.json").write_text("{not json")
    nodes = {n.node: n for n in sets.status(ref).nodes}
    assert list(nodes) == ["n1", "n2", "n3"]
    assert (nodes["n1"].mounted, nodes["n1"].cached_bytes, nodes["n1"].message) == (True, 5000, "")
    assert (nodes["n2"].mounted, nodes["n2"].cached_bytes) == (False, 0) and "not warmed" in nodes[
        "n2"
    ].message
    assert nodes["n3"].cached_bytes == 700 and "not one of its nodes" in nodes["n3"].message


def test_without_fuse_ensure_is_refused_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(FUSE_DEVICE_ENV, str(tmp_path / "no-such-device"))
    sets = SlurmSampleSets(_settings(tmp_path), tmp_path / "slurm" / "samplesets")
    started = time.monotonic()
    with pytest.raises(SampleSetsUnavailable, match="no-such-device"):
        sets.ensure(_ref(tmp_path))
    assert time.monotonic() - started < 1.0


def test_without_fuse_on_a_node_the_worker_fails_with_the_reason_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(FUSE_DEVICE_ENV, str(tmp_path / "no-such-device"))
    monkeypatch.setenv("SLURMD_NODENAME", "n2")
    status = tmp_path / "run" / "trainer-0.0" / "exit.json"
    started = time.monotonic()
    where = ["--volume", str(tmp_path / "vol"), "--name", "ss-7", "--node-cache", str(tmp_path / "local")]
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:  # the node side, meant to be a process of its own, ignores the stop signals while it waits
        code = main(["run", *where, "--run", "alice.j.trainer-0.0", "--status", str(status), "--", "true"])
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        for sig, handler in kept.items():
            signal.signal(sig, handler)
    assert time.monotonic() - started < 5.0
    assert code == CANNOT_MOUNT == json.loads(status.read_text())["exit_code"]
    err = capsys.readouterr().err
    assert "cannot be mounted" in err and "ss-7 on n2" in err and "no-such-device" in err
    assert not (tmp_path / "local" / "runs" / "alice.j.trainer-0.0").exists()  # its folder removed


def test_link_cache_shares_whole_blocks_only(tmp_path: Path) -> None:
    src, dst = tmp_path / "warm" / "uuid", tmp_path / "run" / "uuid"
    block = src / "raw" / "chunks" / "0" / "0" / "1_0_6"
    block.parent.mkdir(parents=True)
    block.write_bytes(b"hello!")
    (block.parent / "2_0_6.tmp").write_bytes(b"half")  # being written
    (src / ".lock").write_text("the cache's id")
    assert link_cache(src, dst) == 1
    linked = dst / "raw" / "chunks" / "0" / "0" / "1_0_6"
    assert linked.stat().st_ino == block.stat().st_ino  # a link, no copy
    assert not (dst / ".lock").exists() and not (linked.parent / "2_0_6.tmp").exists()
    assert link_cache(src, dst) == 0  # what is there already stays
    linked.unlink()  # the run's client evicts it: the node's copy stays
    assert block.read_bytes() == b"hello!"


def test_a_run_sweeps_runs_whose_owner_is_gone_and_keeps_live_ones(tmp_path: Path) -> None:
    paths, volume = NodePaths(tmp_path / "local"), Volume(tmp_path / "vol", "ss-7")
    runs = tmp_path / "local" / "runs"
    for name in ("dead", "live"):
        (runs / name / "cache").mkdir(parents=True)
        (runs / f"{name}.owner").touch()
    fd = os.open(runs / "live.owner", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # its job is running
        with _own_run(paths, volume, "mine") as folder:
            assert folder == paths.run("mine") and folder.is_dir()
            assert not (runs / "dead").exists() and not (runs / "dead.owner").exists()
            assert (runs / "live" / "cache").is_dir()
        assert not folder.exists() and not (runs / "mine.owner").exists()
    finally:
        os.close(fd)


def test_the_node_cache_setting(tmp_path: Path) -> None:
    assert SlurmSettings().node_cache == Path("/var/cache/paddlecloud")
    assert SlurmSettings.from_options({"slurm_node_cache": "/scratch/pc"}).node_cache == Path("/scratch/pc")
    for bad in ("relative/dir", "$TMPDIR/pc"):
        with pytest.raises(OptionError, match="absolute path") as err:
            SlurmSettings.from_options({"slurm_node_cache": bad})
        assert err.value.option == "--slurm-node-cache"


def test_a_jail_spec_without_a_sampleset_still_reads(tmp_path: Path) -> None:
    """Specs written before SampleSets (a job adopted across an upgrade) have no such key."""
    raw = {
        "version": 1, "user": "alice", "env_dir": "/e", "shim": "/s", "data": [], "shared": [], "cwd": "/c",
        "status": "/st", "tmp": "/t", "hostname": "h", "command": ["-m", "x"], "gpus": False, "userns": True,
    }  # fmt: skip
    assert JailSpec.from_dict(raw).sampleset == ""
    assert JailSpec.from_dict({**raw, "sampleset": "/m"}).sampleset == "/m"
