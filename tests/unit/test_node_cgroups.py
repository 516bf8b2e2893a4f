"""A run's cgroup: found on cgroup v1 and v2 hosts, made with the run's limits, read after the run.

The detection and the limit files are checked on made-up hierarchies (mountinfo and /proc/self/cgroup
as a v1 host and a v2 host would show them, the cgroup files as plain files); the kernel's side (an
OOM kill counted, forks refused at pids.max, the CPU quota) on this machine's real cgroups, where
the tests can make them (root; skipped elsewhere with the reason).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from paddlecloud.node.cgroups import CgroupError, Hierarchy, Limits, RunCgroup, describe_memory

V1_MOUNTS = """\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / {root}/cpu rw,relatime - cgroup cgroup rw,cpu
35 31 0:32 / {root}/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / {root}/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / {root}/unified rw,relatime - cgroup2 cgroup2 rw
"""
V1_SELF = "8:pids:/\n4:memory:/session/42\n1:cpu:/\n0::/\n"
V2_MOUNTS = "30 23 0:27 / {root} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
V2_SELF = "0::/user.slice/server.service\n"


def _v1_tree(tmp_path: Path) -> Hierarchy:
    for c in ("cpu", "memory/session/42", "pids", "unified"):
        (tmp_path / c).mkdir(parents=True)
    return Hierarchy.detect(mountinfo=V1_MOUNTS.format(root=tmp_path), proc_cgroup=V1_SELF)


def test_a_v1_host_gets_a_base_per_controller_under_the_servers_own_cgroup(tmp_path: Path) -> None:
    tree = _v1_tree(tmp_path)  # the v2 mount has no controllers: v1 it is
    assert tree.version == 1
    assert tree.dirs == {
        "memory": tmp_path / "memory/session/42/paddlecloud",
        "pids": tmp_path / "pids/paddlecloud",
        "cpu": tmp_path / "cpu/paddlecloud",
    }
    run = tree.create("alice.job.trainer-0.r0", Limits(memory=512 * 2**20, cpu_m=250, pids=100))
    files = {c: p for c, p in run.dirs}
    assert (files["memory"] / "memory.limit_in_bytes").read_text() == str(512 * 2**20)
    assert (files["pids"] / "pids.max").read_text() == "100"
    assert (files["cpu"] / "cpu.cfs_quota_us").read_text() == "25000"  # a quarter of 100 ms
    assert (files["cpu"] / "cpu.cfs_period_us").read_text() == "100000"
    (files["memory"] / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    (files["pids"] / "pids.events").write_text("max 17\n")
    assert run.oom_kills() == 2 and run.pids_refused() == 17
    assert RunCgroup.from_json(run.to_json()) == run and RunCgroup.from_json({"version": 3}) is None


def test_all_runs_together_are_capped_in_processes(tmp_path: Path) -> None:
    """Found in review: the pids limit was per run only, so a user's many runs could take the
    host's whole pid table."""
    tree = _v1_tree(tmp_path)
    tree.cap_pids(24576)
    assert (tmp_path / "pids/paddlecloud/pids.max").read_text() == "24576"


def test_a_v2_host_with_the_controllers_gets_one_folder_per_run(tmp_path: Path) -> None:
    own = tmp_path / "user.slice/server.service"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (own / "cgroup.subtree_control").write_text("")
    tree = Hierarchy.detect(mountinfo=V2_MOUNTS.format(root=tmp_path), proc_cgroup=V2_SELF)
    assert tree.version == 2 and tree.base == own / "paddlecloud"
    (own / "paddlecloud").mkdir()
    (own / "paddlecloud/cgroup.subtree_control").write_text("")
    run = tree.create("r1", Limits(memory=2**30, cpu_m=1500, pids=64))
    folder = own / "paddlecloud/r1"
    assert run.paths == (folder,)
    assert (folder / "memory.max").read_text() == str(2**30)
    assert (folder / "cpu.max").read_text() == "150000 100000" and (folder / "pids.max").read_text() == "64"
    assert (own / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"  # delegated to its children
    (folder / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
    assert run.oom_kills() == 1


def test_a_host_without_usable_controllers_says_what_is_missing(tmp_path: Path) -> None:
    own = tmp_path / "user.slice/server.service"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu io\n")
    with pytest.raises(CgroupError, match="lacks memory, pids"):
        Hierarchy.detect(mountinfo=V2_MOUNTS.format(root=tmp_path), proc_cgroup=V2_SELF)
    with pytest.raises(CgroupError, match="no cgroup"):
        Hierarchy.detect(mountinfo="", proc_cgroup="")


def test_memory_is_described_as_users_write_it() -> None:
    sizes = (512 * 2**20, 2 * 2**30, 1536, 1000)
    assert [describe_memory(n) for n in sizes] == ["512Mi", "2Gi", "1536", "1000"]


# -- the kernel's side ---------------------------------------------------------------------------


@pytest.fixture
def real() -> Hierarchy:
    try:
        tree = Hierarchy.detect()
        tree.create("pc-test-probe", Limits(pids=10)).remove()
    except (CgroupError, OSError) as exc:
        pytest.skip(f"no writable cgroup hierarchy here: {exc}")
    return tree


def _run_in(run: RunCgroup, code: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], preexec_fn=run.join, capture_output=True, text=True, timeout=timeout
    )


def test_a_process_over_its_memory_limit_is_oom_killed_and_counted(real: Hierarchy) -> None:
    run = real.create(f"pc-test-oom-{os.getpid()}", Limits(memory=128 * 2**20))
    try:
        r = _run_in(run, "x = bytearray(512 * 2**20); print('survived')")
        assert r.returncode == -9 and "survived" not in r.stdout
        assert run.oom_kills() == 1
    finally:
        run.remove()
    assert not any(p.exists() for p in run.paths)


def test_forks_stop_at_the_pids_limit_and_the_rest_is_killed_on_removal(real: Hierarchy) -> None:
    run = real.create(f"pc-test-pids-{os.getpid()}", Limits(pids=20))
    code = (
        "import os, time\nkids = 0\n"
        "for _ in range(100):\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
        "    if pid == 0:\n        time.sleep(60)\n        os._exit(0)\n    kids += 1\n"
        "print(kids, flush=True)\ntime.sleep(60)\n"
    )
    argv = [sys.executable, "-c", code]
    proc = subprocess.Popen(argv, preexec_fn=run.join, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        kids = int(proc.stdout.readline())
        assert kids < 20 and run.pids_refused() >= 1 and len(run.pids()) == kids + 1
    finally:
        run.remove()  # kills every one of them
    assert proc.wait(timeout=10) == -9


def test_the_cpu_quota_holds_a_busy_loop_to_its_share(real: Hierarchy) -> None:
    run = real.create(f"pc-test-cpu-{os.getpid()}", Limits(cpu_m=200))
    try:
        start = time.monotonic()
        busy = "import time\nt = time.time()\nwhile time.time() - t < 2: pass\nprint(time.process_time())"
        r = _run_in(run, busy)
        wall = time.monotonic() - start
        assert float(r.stdout) < 0.35 * wall  # 0.2 of a core (the machine's own load only lowers it)
    finally:
        run.remove()
