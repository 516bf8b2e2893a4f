"""SampleSets on the local backend (backends/local/samplesets.py) against real JuiceFS mounts: the
lifecycle (ensure, sync, warmup, clear, rmr, delete), a machine without FUSE, and a sandboxed job
that reads its SampleSet read-only at PADDLECLOUD_SAMPLESET_DIR and sees no other."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from paddlecloud.backends.base import Capability, JobLaunch
from paddlecloud.backends.errors import BackendUnavailable
from paddlecloud.backends.local import LocalBackend, LocalConfig, NodeShape
from paddlecloud.backends.local.samplesets import LocalSampleSets
from paddlecloud.backends.samplesets import (
    SampleSetRef,
    SampleSetsUnavailable,
    SampleTask,
    SampleTaskKind,
    SampleTaskState,
    SampleTaskStatus,
)
from paddlecloud.core.envcontract import ApiAccess
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import WorkerPlacement
from paddlecloud.storage.juicefs import FUSE_DEVICE_ENV, cached_bytes, mounts_under
from tests.e2e.juicefs_fixtures import digests, make_tree, reader_package, run_to_success, unmounted_after

MiB = 1 << 20
NODES = ("node-0", "node-1")


def _ref(source: Path, uid: str = "ss-1", nodes: tuple[str, ...] = NODES) -> SampleSetRef:
    return SampleSetRef(key=f"alice/{uid}", owner="alice", name=uid, uid=uid, source=source,
                        cache_size=64 * MiB, nodes=nodes)  # fmt: skip


def _run(
    sets: LocalSampleSets, ref: SampleSetRef, task: SampleTask, timeout: float = 120
) -> SampleTaskStatus:
    sets.start_task(ref, task)
    sets.start_task(ref, task)  # the same id again changes nothing
    deadline = time.monotonic() + 120
    while (st := sets.task_status(ref, task.id)).state == SampleTaskState.RUNNING:
        assert time.monotonic() < deadline, f"{task} still running: {st}"
        time.sleep(0.1)
    assert st.state == SampleTaskState.SUCCEEDED, st.message
    return st


@pytest.fixture
def sets(tmp_path: Path) -> Iterator[LocalSampleSets]:
    s = LocalSampleSets(tmp_path / "cluster" / "samplesets", NODES)
    with unmounted_after(tmp_path):
        try:
            yield s
        finally:
            s.close()


def test_lifecycle_sync_warmup_clear_rmr_delete(sets: LocalSampleSets, tmp_path: Path) -> None:
    want = make_tree(tmp_path / "src", big=6 * MiB)
    total = sum((tmp_path / "src" / p).stat().st_size for p in want)
    ref = _ref(tmp_path / "src")
    sets.ensure(ref)
    sets.ensure(ref)  # idempotent
    assert [(n.node, n.mounted, n.cached_bytes) for n in sets.status(ref).nodes] == [
        ("node-0", True, 0),
        ("node-1", True, 0),
    ]

    st = _run(sets, ref, SampleTask("sj-1", SampleTaskKind.SYNC))
    assert (st.done, st.total) == (total, total)
    status = sets.status(ref)
    assert (status.files, status.bytes) == (len(want), total)
    for node in NODES:  # every node mount shows the synced tree (remounted after the sync)
        assert digests(sets.mountpoint(ref.uid, node)) == want

    st = _run(sets, ref, SampleTask("sj-2", SampleTaskKind.WARMUP))
    assert (st.done, st.total) == (2 * total, 2 * total)
    for n in sets.status(ref).nodes:
        assert total <= n.cached_bytes <= total * 1.1, n

    st = _run(sets, ref, SampleTask("sj-3", SampleTaskKind.CLEAR))
    assert (st.done, st.total) == (2, 2)
    assert [n.cached_bytes for n in sets.status(ref).nodes] == [0, 0]

    _run(sets, ref, SampleTask("sj-4", SampleTaskKind.RMR, "part-1"))
    left = {p: d for p, d in want.items() if not p.startswith("part-1/")}
    assert sets.status(ref).files == len(left)
    for node in NODES:
        assert digests(sets.mountpoint(ref.uid, node)) == left

    sets.delete(ref)
    assert mounts_under(sets.folder(ref.uid)) == []
    assert not sets.folder(ref.uid).exists()
    gone = sets.task_status(ref, "sj-4")
    assert gone.state == SampleTaskState.FAILED and "unknown" in gone.message
    sets.delete(ref)  # idempotent


def test_a_whole_warmup_copies_the_set_onto_each_node_and_a_sync_makes_the_copies_stale(
    sets: LocalSampleSets, tmp_path: Path
) -> None:
    """Short-circuit reads: a set that fits the cache is copied onto each node (jobs read plain
    files); a sync makes every copy stale at once; a stale copy a job reads stays until it ends."""
    src = tmp_path / "src"
    want = make_tree(src, small=12, big=MiB)
    ref = _ref(src)
    sets.ensure(ref)
    _run(sets, ref, SampleTask("sj-1", SampleTaskKind.SYNC))
    _run(sets, ref, SampleTask("sj-2", SampleTaskKind.WARMUP))
    for node in NODES:
        copy = sets.copy_dir(ref.uid, node)
        assert sets.view(ref.uid, node) == copy and digests(copy) == want
        assert all(p.stat().st_mode & 0o222 == 0 for p in copy.rglob("*.bin"))  # read-only files
        assert cached_bytes(sets.cache_dir(ref.uid, node)) == 0  # the copy instead of the block cache
    total = sum((src / p).stat().st_size for p in want)
    assert [(n.local_copy, n.cached_bytes) for n in sets.status(ref).nodes] == [(True, total)] * 2
    assert sets.attach(ref, "alice/job", ["node-1"]) == {"node-1": sets.copy_dir(ref.uid, "node-1")}

    (src / "new.bin").write_bytes(b"new")
    _run(sets, ref, SampleTask("sj-3", SampleTaskKind.SYNC))
    assert [n.local_copy for n in sets.status(ref).nodes] == [False, False]
    assert sets.view(ref.uid, "node-0") == sets.mountpoint(ref.uid, "node-0")
    assert not sets.copy_dir(ref.uid, "node-0").exists()  # stale and unused: removed
    assert digests(sets.copy_dir(ref.uid, "node-1")) == want  # the job's view is kept as it was
    assert "new.bin" in digests(sets.mountpoint(ref.uid, "node-0"))

    _run(sets, ref, SampleTask("sj-4", SampleTaskKind.WARMUP))
    now = digests(src)
    assert digests(sets.view(ref.uid, "node-0")) == now and sets.status(ref).nodes[0].local_copy
    assert not sets.status(ref).nodes[1].local_copy  # the job still reads the stale copy there:
    assert cached_bytes(sets.cache_dir(ref.uid, "node-1")) > 0  # its mount's cache was warmed
    sets.detach("alice/job")
    sets.ensure(ref)
    assert not sets.copy_dir(ref.uid, "node-1").exists()  # no job: the stale copy is gone
    _run(sets, ref, SampleTask("sj-5", SampleTaskKind.WARMUP))
    assert digests(sets.view(ref.uid, "node-1")) == now


def test_a_set_larger_than_the_cache_is_read_through_the_mount(sets: LocalSampleSets, tmp_path: Path) -> None:
    make_tree(tmp_path / "src", small=4, big=3 * MiB)
    ref = SampleSetRef(key="alice/ss-1", owner="alice", name="ss-1", uid="ss-1", source=tmp_path / "src",
                       cache_size=2 * MiB, nodes=("node-0",))  # fmt: skip
    sets.ensure(ref)
    _run(sets, ref, SampleTask("sj-1", SampleTaskKind.SYNC))
    _run(sets, ref, SampleTask("sj-2", SampleTaskKind.WARMUP))
    assert not sets.copy_dir(ref.uid, "node-0").exists()
    assert sets.view(ref.uid, "node-0") == sets.mountpoint(ref.uid, "node-0")
    node = sets.status(ref).nodes[0]
    assert not node.local_copy and node.cached_bytes > 0  # the mount's block cache was warmed instead


def test_ensure_follows_the_node_list_but_keeps_a_node_a_job_uses(
    sets: LocalSampleSets, tmp_path: Path
) -> None:
    make_tree(tmp_path / "src", small=4, big=1000)
    ref = _ref(tmp_path / "src")
    sets.ensure(ref)
    sets.attach(ref, "alice/job", ["node-1"])
    sets.ensure(_ref(tmp_path / "src", nodes=("node-0",)))
    assert [n.mounted for n in sets.status(ref).nodes] == [True, True]  # node-1: the job's
    sets.detach("alice/job")
    sets.ensure(_ref(tmp_path / "src", nodes=("node-0",)))
    assert [n.mounted for n in sets.status(ref).nodes] == [True, False]
    unknown = sets.status(_ref(tmp_path / "src", nodes=("node-0", "node-9"))).nodes[1]
    assert not unknown.mounted and "node-9" in unknown.message


def test_close_unmounts_all_and_ensure_brings_the_data_back(sets: LocalSampleSets, tmp_path: Path) -> None:
    want = make_tree(tmp_path / "src", small=6, big=1000)
    ref = _ref(tmp_path / "src")
    sets.ensure(ref)
    _run(sets, ref, SampleTask("sj-1", SampleTaskKind.SYNC))
    sets.close()  # the server stops
    assert mounts_under(sets.root) == []
    with pytest.raises(BackendUnavailable, match="not mounted"):
        sets.status(ref)  # no zeros while nothing is mounted
    again = LocalSampleSets(sets.root, NODES)  # the server starts again
    try:
        again.ensure(ref)
        assert (again.status(ref).files, digests(again.mountpoint(ref.uid, "node-1"))) == (len(want), want)
    finally:
        again.close()


def test_close_keeps_the_mounts_of_running_jobs_and_says_which(sets: LocalSampleSets, tmp_path: Path) -> None:
    want = make_tree(tmp_path / "src", small=3, big=1000)
    ref = _ref(tmp_path / "src")
    sets.ensure(ref)
    _run(sets, ref, SampleTask("sj-1", SampleTaskKind.SYNC))
    sets.attach(ref, "alice/job", ["node-1"])  # a job reading on node-1 outlives the server
    kept = sets.close()
    assert kept == [sets.mountpoint(ref.uid, "node-1")]
    assert mounts_under(sets.root) == kept
    assert digests(kept[0]) == want  # its workers still read through it
    sets.detach("alice/job")
    assert sets.close() == [] and mounts_under(sets.root) == []


def test_a_sync_of_a_missing_source_fails_with_the_reason(sets: LocalSampleSets, tmp_path: Path) -> None:
    ref = _ref(tmp_path / "nowhere")
    sets.ensure(ref)
    sets.start_task(ref, SampleTask("sj-1", SampleTaskKind.SYNC))
    deadline = time.monotonic() + 60
    while (st := sets.task_status(ref, "sj-1")).state == SampleTaskState.RUNNING:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert st.state == SampleTaskState.FAILED and "nowhere" in st.message


def test_without_fuse_ensure_is_refused_at_once(
    sets: LocalSampleSets, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FUSE_DEVICE_ENV, str(tmp_path / "no-such-device"))
    started = time.monotonic()
    with pytest.raises(SampleSetsUnavailable, match="no-such-device"):
        sets.ensure(_ref(tmp_path / "src"))
    assert time.monotonic() - started < 1.0
    assert mounts_under(tmp_path) == []


# -- a job that names a SampleSet ------------------------------------------------------------------


def test_a_sandboxed_job_reads_its_sampleset_read_only_on_every_node(tmp_path: Path) -> None:
    nodes = NodeShape(count=2, cpu_m=4000, memory=8 * 2**30)
    backend = LocalBackend(
        LocalConfig(root=tmp_path / "cluster", nodes=nodes, isolation="sandbox"), time.time, lambda: None
    )
    assert Capability.SAMPLESETS in backend.capabilities and backend.isolation.sandboxed
    with unmounted_after(tmp_path):
        try:
            want = make_tree(tmp_path / "src", small=12, big=MiB)
            ref = _ref(tmp_path / "src")
            other = _ref(tmp_path / "src", uid="ss-2", nodes=("node-0",))  # someone else's
            for r in (ref, other):
                backend.samplesets.ensure(r)
            _run(backend.samplesets, ref, SampleTask("sj-1", SampleTaskKind.SYNC))
            for name, view in (
                ("mounted", backend.samplesets.mountpoint),
                ("copied", backend.samplesets.copy_dir),
            ):
                out = tmp_path / name
                launch = JobLaunch(
                    key=f"alice/{name}", user="alice", name=name, framework="none", entry="python read.py",
                    package=reader_package(tmp_path / "reader.tar.gz"), output_dir=out,
                    placement=tuple(WorkerPlacement("trainer", i, n) for i, n in enumerate(NODES)),
                    api=ApiAccess("http://127.0.0.1:9", "pcj_test"),
                    resources={"trainer": Resources(100, 2**26)},
                    package_path=f"/pfs/local/home/alice/jobs/{name}/package.tar.gz", sampleset=ref,
                    env={"OTHER": str(backend.samplesets.mountpoint(other.uid, "node-0"))},
                )  # fmt: skip
                run_to_success(backend, launch)
                for i, node in enumerate(NODES):
                    got = json.loads((out / f"trainer-{i}.json").read_text())
                    assert got["root"] == str(view(ref.uid, node))
                    assert got["files"] == want
                    assert got["write"] == "EROFS"  # a node-local copy is bound read-only too
                    assert got["other"] is False  # another SampleSet's mount does not exist inside
                backend.forget(launch.key)
                # a whole warmup copies the set onto both nodes: the next job reads the copies
                _run(backend.samplesets, ref, SampleTask("sj-2", SampleTaskKind.WARMUP))
        finally:
            backend.close()
    assert mounts_under(tmp_path) == []
