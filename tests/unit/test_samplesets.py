"""SampleSets on the platform (controller/services/samplesets.py) over the strict memory backend.

The lifecycle (create -> ensure -> sync -> warmup -> Ready; SampleJobs one at a time, in order;
Failed with the reason), tenancy (another user's SampleSet is not found, everywhere), the cache
counted in the storage quota, delete while a job names it, validation (4xx with stable codes), and
jobs that name a SampleSet: held until Ready, launched with its ref, placed with its cache nodes.
The loop is ticked by hand (``loop.tick()``); the memory backend ends a task at its first status
read unless ``hold`` is set.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from memory_platform import GI, MemoryWorld

from paddlecloud.api.errors import ErrorCode, PaddleCloudError
from paddlecloud.api.samplesets import SampleJobPhase, SampleSetPhase
from paddlecloud.backends.base import Capability, NodeInfo
from paddlecloud.backends.errors import JobRejected
from paddlecloud.backends.memory.backend import ALL
from paddlecloud.backends.memory.samplesets import MemorySampleSets
from paddlecloud.backends.samplesets import SampleSetRef, SampleTask, SampleTaskKind
from paddlecloud.client import Client
from paddlecloud.controller.services.quotas import set_storage_quota
from paddlecloud.core.phases import JobPhase
from paddlecloud.core.resources import Resources

pytestmark = pytest.mark.timeout(60)

NODES = (NodeInfo("mem-0", Resources(4000, 8 * GI)), NodeInfo("mem-1", Resources(4000, 8 * GI)))
DATA = {"a.txt": b"a" * 1000, "sub/b.bin": b"b" * 3000, "sub/deep/c": b"c" * 500}


@pytest.fixture
def world(tmp_path: Path) -> Iterator[MemoryWorld]:
    w = MemoryWorld(tmp_path, nodes=NODES)
    yield w
    w.close()


def put_data(w: MemoryWorld, user: str, rel: str, files: dict[str, bytes] = DATA) -> str:
    """Files in ``user``'s PFS home, written as a job would; their /pfs path."""
    files_svc = w.platform.files
    path = f"/pfs/local/home/{user}/{rel}"
    root = files_svc.local_path(files_svc.parse(path))
    assert root is not None
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return path


def engine(w: MemoryWorld) -> MemorySampleSets:
    backend = w.platform.ctx.backend
    found: MemorySampleSets = backend.samplesets  # type: ignore[attr-defined]
    return found


def settle(w: MemoryWorld, times: int = 6) -> None:
    for _ in range(times):
        w.platform.sampleset_loop.tick()


def error_of(fn: Callable[[], object]) -> PaddleCloudError:
    with pytest.raises(PaddleCloudError) as info:
        fn()
    return info.value


def ready(w: MemoryWorld, alice: Client, name: str = "mnist") -> None:
    alice.create_sampleset(name, put_data(w, "alice", "data"))
    settle(w)
    assert alice.sampleset(name).phase == SampleSetPhase.READY


# -- lifecycle -------------------------------------------------------------------------------------


def test_create_syncs_then_warms_up_by_itself_and_is_ready(world: MemoryWorld) -> None:
    alice = world.client("alice")
    view = alice.create_sampleset("mnist", put_data(world, "alice", "data"))
    assert view.phase == SampleSetPhase.PENDING
    assert [(j.kind, j.phase) for j in view.jobs] == [("warmup", "Pending"), ("sync", "Pending")]
    engine(world).hold = True
    settle(world, 1)  # ensured; the sync started
    v = alice.sampleset("mnist")
    assert v.phase == SampleSetPhase.SYNCING
    assert [j.phase for j in v.jobs] == ["Pending", "Running"]  # one at a time, in order
    engine(world).hold = False
    settle(world)
    v = alice.sampleset("mnist")
    assert v.phase == SampleSetPhase.READY, v.message
    assert (v.files, v.bytes) == (3, 4500)
    assert [(n.node, n.mounted, n.cached_bytes) for n in v.nodes] == [
        ("mem-0", True, 4500),
        ("mem-1", True, 4500),
    ]
    assert v.cached_bytes == 9000
    assert [(j.kind, j.phase) for j in v.jobs] == [("warmup", "Succeeded"), ("sync", "Succeeded")]
    assert v.cache_size == 64 * 2**20  # the default's floor
    calls = engine(world).calls
    assert calls[0] == ("ensure", "ss-1") and [c[0] for c in calls[1:3]] == ["start_task", "start_task"]


def test_clear_then_rmr_run_in_order_and_change_the_volume(world: MemoryWorld) -> None:
    alice = world.client("alice")
    ready(world, alice)
    alice.sampleset_job("mnist", "clear")
    alice.sampleset_job("mnist", "rmr", "./sub/")
    settle(world)
    v = alice.sampleset("mnist")
    assert (v.files, v.bytes, v.cached_bytes) == (1, 1000, 0)
    assert [(j.kind, j.path, j.phase) for j in v.jobs[:2]] == [
        ("rmr", "sub", "Succeeded"),
        ("clear", "", "Succeeded"),
    ]
    alice.sampleset_job("mnist", "warmup", "a.txt")
    settle(world)
    assert alice.sampleset("mnist").cached_bytes == 2000


def test_a_failed_sync_fails_the_sampleset_and_a_new_sync_recovers_it(world: MemoryWorld) -> None:
    alice = world.client("alice")
    alice.create_sampleset("mnist", put_data(world, "alice", "data"))
    engine(world).hold = True
    settle(world, 1)
    engine(world).finish("ss-1", "sj-1", ok=False, message="object store full")
    settle(world, 1)
    v = alice.sampleset("mnist")
    # the warmup after it still runs (one at a time); the set stays Failed: its data is incomplete
    engine(world).hold = False
    settle(world)
    v = alice.sampleset("mnist")
    assert v.phase == SampleSetPhase.FAILED
    assert "sync failed: object store full" in v.message and "sampleset sync" in v.message
    alice.sampleset_job("mnist", "sync")
    settle(world)
    assert alice.sampleset("mnist").phase == SampleSetPhase.READY


def test_no_fuse_fails_the_sampleset_with_the_reason_and_no_hang(world: MemoryWorld) -> None:
    world.engine.volumes.unavailable = (
        "/dev/fuse is missing (modprobe fuse, or run the server with --device /dev/fuse)"
    )
    alice = world.client("alice")
    alice.create_sampleset("mnist", put_data(world, "alice", "data"))
    settle(world, 2)
    v = alice.sampleset("mnist")
    assert v.phase == SampleSetPhase.FAILED
    assert "cannot mount SampleSets" in v.message and "/dev/fuse is missing" in v.message
    assert all(j.phase == "Failed" and "/dev/fuse" in j.message for j in v.jobs)
    ensures = sum(1 for c in engine(world).calls if c[0] == "ensure")
    settle(world, 3)  # not tried again every cycle ...
    assert sum(1 for c in engine(world).calls if c[0] == "ensure") == ensures
    world.engine.volumes.unavailable = None
    alice.sampleset_job("mnist", "sync")  # ... but when asked again
    settle(world)
    assert alice.sampleset("mnist").phase == SampleSetPhase.READY


def test_a_backend_without_the_capability_refuses_up_front(tmp_path: Path) -> None:
    w = MemoryWorld(tmp_path, nodes=NODES, capabilities=ALL - {Capability.SAMPLESETS})
    try:
        alice = w.client("alice")
        err = error_of(lambda: alice.create_sampleset("mnist", put_data(w, "alice", "data")))
        assert err.code == ErrorCode.SAMPLESETS_UNAVAILABLE and "memory backend" in err.message
    finally:
        w.close()


def test_delete_unmounts_and_frees_the_name(world: MemoryWorld) -> None:
    alice = world.client("alice")
    ready(world, alice)
    assert alice.delete_sampleset("mnist").deleting
    assert error_of(lambda: alice.sampleset("mnist")).code == ErrorCode.SAMPLESET_NOT_FOUND
    err = error_of(lambda: alice.create_sampleset("mnist", "/pfs/local/home/alice/data"))
    assert err.code == ErrorCode.SAMPLESET_EXISTS and "being deleted" in err.message
    settle(world, 1)
    assert ("delete", "ss-1") in engine(world).calls and "ss-1" not in world.engine.volumes.volumes
    assert alice.samplesets() == []
    alice.create_sampleset("mnist", "/pfs/local/home/alice/data")  # the name is free again


def test_after_a_restart_it_is_mounted_again_and_a_running_job_started_again(world: MemoryWorld) -> None:
    alice = world.client("alice")
    alice.create_sampleset("mnist", put_data(world, "alice", "data"))
    engine(world).hold = True
    settle(world, 1)
    world.reopen()  # the backend's task states are gone, its mounts too
    assert not world.engine.volumes.volumes["ss-1"].mounted
    alice = world.client("alice")
    settle(world)
    v = alice.sampleset("mnist")
    assert v.phase == SampleSetPhase.READY and all(n.mounted for n in v.nodes)
    assert [j.phase for j in v.jobs] == ["Succeeded", "Succeeded"]


def test_the_strict_backend_refuses_a_task_on_a_sampleset_never_ensured(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    ref = SampleSetRef("alice/x", "alice", "x", "ss-9", tmp_path / "src", 2**20, ("mem-0",))
    from paddlecloud.backends.memory.samplesets import MemoryVolumes

    ss = MemorySampleSets(MemoryVolumes(), ("mem-0",))
    with pytest.raises(JobRejected, match="never ensured"):
        ss.start_task(ref, SampleTask("sj-1", SampleTaskKind.SYNC))
    ss.ensure(ref)
    ss.hold = True
    ss.start_task(ref, SampleTask("sj-1", SampleTaskKind.SYNC))
    with pytest.raises(JobRejected, match="one task at a time"):
        ss.start_task(ref, SampleTask("sj-2", SampleTaskKind.WARMUP))
    assert ss.task_status(ref, "sj-7").state == "failed"  # never started


# -- tenancy, quota, in use ------------------------------------------------------------------------


def test_another_users_sampleset_is_not_found_everywhere(world: MemoryWorld, tmp_path: Path) -> None:
    alice, bob = world.client("alice"), world.client("bob")
    ready(world, alice)
    for call in (
        lambda: bob.sampleset("mnist"),
        lambda: bob.sample_jobs("mnist"),
        lambda: bob.sampleset_job("mnist", "clear"),
        lambda: bob.delete_sampleset("mnist"),
    ):
        err = error_of(call)
        assert err.code == ErrorCode.SAMPLESET_NOT_FOUND, err
    assert bob.samplesets() == []
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "train.py").write_text("print(1)\n")
    err = error_of(lambda: world.submit(bob, "steal", pkg, sampleset="mnist"))
    assert err.code == ErrorCode.SAMPLESET_NOT_FOUND and err.field == "sampleset"
    # bob may have his own of the same name
    bob.create_sampleset("mnist", put_data(world, "bob", "data"))
    assert error_of(lambda: bob.samplesets(all_users=True)).code == ErrorCode.FORBIDDEN
    admin = world.client("root", admin=True)
    assert sorted((v.owner, v.name) for v in admin.samplesets(all_users=True)) == [
        ("alice", "mnist"),
        ("bob", "mnist"),
    ]


def test_source_must_be_a_folder_the_owner_may_read(world: MemoryWorld) -> None:
    alice = world.client("alice")
    put_data(world, "bob", "secret")
    put_data(world, "alice", "data")
    cases = [
        ("/pfs/local/home/bob/secret", ErrorCode.FORBIDDEN),
        ("/pfs/local/home/alice/nothing", ErrorCode.PATH_NOT_FOUND),
        ("/pfs/local/home/alice/data/a.txt", ErrorCode.NOT_A_DIRECTORY),
        ("/pfs/local/home/alice/../bob/secret", ErrorCode.INVALID_PATH),
        ("/etc", ErrorCode.INVALID_REQUEST),
    ]
    for source, code in cases:
        err = error_of(lambda source=source: alice.create_sampleset("s1", source))  # type: ignore[misc]
        assert err.code == code, (source, err)
    assert alice.samplesets() == []


@pytest.mark.parametrize(
    ("name", "kw", "code", "field"),
    [
        ("Bad_Name", {}, ErrorCode.INVALID_REQUEST, "name"),
        ("ok", {"cache_size": "lots"}, ErrorCode.INVALID_REQUEST, "cache_size"),
        ("ok", {"cache_size": "1Ki"}, ErrorCode.INVALID_REQUEST, "cache_size"),
        ("ok", {"nodes": ["mem-9"]}, ErrorCode.INVALID_REQUEST, "nodes"),
    ],
)
def test_bad_create_requests_get_a_4xx_with_a_stable_code(
    world: MemoryWorld, name: str, kw: dict[str, object], code: ErrorCode, field: str
) -> None:
    alice = world.client("alice")
    err = error_of(lambda: alice.create_sampleset(name, put_data(world, "alice", "data"), **kw))  # type: ignore[arg-type]
    assert err.code == code and field in (err.field or err.message), err


@pytest.mark.parametrize(
    ("kind", "path", "words"),
    [
        ("rmr", "../other", '".."'),
        ("rmr", "sub/../../x", '".."'),
        ("rmr", "/etc", "absolute"),
        ("rmr", "", "empty"),
        ("rmr", "./", "empty"),
        ("warmup", "a/../..", '".."'),
        ("sync", "sub", "not taken"),
        ("clear", "x", "not taken"),
    ],
)
def test_bad_sample_job_paths_are_refused(world: MemoryWorld, kind: str, path: str, words: str) -> None:
    alice = world.client("alice")
    ready(world, alice)
    err = error_of(lambda: alice.sampleset_job("mnist", kind, path))
    assert err.code == ErrorCode.SAMPLESET_PATH_INVALID and words in err.message, err
    r = alice.request  # an unknown kind is a body validation error, not a 5xx
    err = error_of(lambda: r("POST", "/samplesets/mnist/jobs", json={"kind": "format", "path": ""}))
    assert err.code == ErrorCode.INVALID_SPEC


def test_the_cache_counts_against_the_storage_quota(world: MemoryWorld, tmp_path: Path) -> None:
    alice = world.client("alice")
    source = put_data(world, "alice", "data")  # 4,500 bytes in PFS
    with world.platform.ctx.session() as s:
        set_storage_quota(s, "alice", 4500 + 2 * 4500 - 1)  # one byte short of two full caches
    err = error_of(lambda: alice.create_sampleset("mnist", source))
    assert err.code == ErrorCode.QUOTA_EXCEEDED
    with world.platform.ctx.session() as s:
        set_storage_quota(s, "alice", 4500 + 2 * 4500 + 100)
    alice.create_sampleset("mnist", source)
    settle(world)
    usage = alice.pfs.usage()
    assert (usage.used, usage.samplesets) == (4500 + 9000, 9000)
    more = tmp_path / "more.bin"
    more.write_bytes(b"x" * 200)
    err = error_of(
        lambda: alice.pfs.upload_file(more, alice.pfs.full("pfs:more.bin"))
    )  # PFS + caches > limit
    assert err.code == ErrorCode.QUOTA_EXCEEDED and "SampleSet caches" in err.message
    alice.sampleset_job("mnist", "clear")
    settle(world)
    assert alice.pfs.usage().samplesets == 0


def test_delete_is_refused_while_a_live_job_names_it(world: MemoryWorld, tmp_path: Path) -> None:
    alice = world.client("alice")
    ready(world, alice)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "train.py").write_text("print(1)\n")
    world.submit(alice, "train", pkg, sampleset="mnist")
    err = error_of(lambda: alice.delete_sampleset("mnist"))
    assert err.code == ErrorCode.SAMPLESET_IN_USE and "train" in err.message
    alice.kill("train")
    world.tick(2)
    assert alice.job("train").phase == JobPhase.KILLED
    alice.delete_sampleset("mnist")


# -- jobs that read a SampleSet --------------------------------------------------------------------


def test_a_job_waits_until_its_sampleset_is_ready_then_starts_with_it(
    world: MemoryWorld, tmp_path: Path
) -> None:
    alice = world.client("alice")
    alice.create_sampleset("mnist", put_data(world, "alice", "data"))
    world.submit(alice, "train", package(tmp_path), sampleset="mnist")
    world.tick()
    job = alice.job("train")
    assert (job.phase, job.reason) == (JobPhase.QUEUED, "SampleSetNotReady")
    assert "waiting for SampleSet 'mnist' to be Ready (Pending)" in job.message
    assert [e.reason for e in job.events].count("SampleSetNotReady") == 1
    settle(world)
    world.tick()
    snap, _plan = world.platform.reconciler.last_round or (None, None)
    assert snap is not None and snap.queue[0].cache_nodes == frozenset({"mem-0", "mem-1"})
    job = alice.job("train")
    assert job.phase in (JobPhase.STARTING, JobPhase.RUNNING), job.message
    launch = world.engine.jobs["alice/train"].launch
    assert launch.sampleset is not None
    assert (launch.sampleset.uid, launch.sampleset.nodes, launch.sampleset.owner) == (
        "ss-1",
        ("mem-0", "mem-1"),
        "alice",
    )
    assert job.spec.sampleset == "mnist"


def test_cache_nodes_are_those_caching_nine_tenths_of_it(world: MemoryWorld, tmp_path: Path) -> None:
    alice = world.client("alice")
    alice.create_sampleset("mnist", put_data(world, "alice", "data"), nodes=["mem-1"])
    settle(world)
    world.submit(alice, "train", package(tmp_path), sampleset="mnist")
    world.tick()
    snap, _plan = world.platform.reconciler.last_round or (None, None)
    assert snap is not None and snap.queue[0].cache_nodes == frozenset({"mem-1"})
    # wherever it was placed, the job's node has the SampleSet mounted
    job = alice.job("train")
    assert job.phase in (JobPhase.STARTING, JobPhase.RUNNING), job.message
    placed = {w.node for w in job.workers}
    assert placed <= world.engine.volumes.volumes["ss-1"].mounted
    alice.sampleset_job("mnist", "clear")
    alice.sampleset_job("mnist", "warmup", "sub")  # 3,500 of 4,500 bytes: under 90 %
    settle(world)
    world.submit(alice, "train2", package(tmp_path), sampleset="mnist")
    world.tick()
    snap, _plan = world.platform.reconciler.last_round or (None, None)
    assert snap is not None
    assert {q.key: q.cache_nodes for q in snap.queue}.get("alice/train2") == frozenset()


def package(tmp_path: Path) -> Path:
    pkg = tmp_path / "pkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "train.py").write_text("print(1)\n")
    return pkg


def test_a_job_without_a_sampleset_is_unchanged(world: MemoryWorld, tmp_path: Path) -> None:
    alice = world.client("alice")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "train.py").write_text("print(1)\n")
    world.submit(alice, "plain", pkg)
    world.tick()
    assert world.engine.jobs["alice/plain"].launch.sampleset is None
    snap, _ = world.platform.reconciler.last_round or (None, None)
    assert snap is not None and snap.queue[0].cache_nodes == frozenset()
    assert "sampleset" not in alice.job("plain").spec.model_dump(exclude_none=True)


def test_deleting_a_user_removes_their_samplesets(world: MemoryWorld) -> None:
    alice = world.client("alice")
    ready(world, alice)
    admin = world.client("root", admin=True)
    admin.delete_user("alice", force=True)
    settle(world, 1)
    assert ("delete", "ss-1") in engine(world).calls and "ss-1" not in world.engine.volumes.volumes
    assert admin.samplesets(all_users=True) == []


def test_the_forecast_leaves_out_a_job_held_for_its_sampleset(world: MemoryWorld, tmp_path: Path) -> None:
    alice = world.client("alice")
    alice.create_sampleset("mnist", put_data(world, "alice", "data"))
    world.submit(alice, "train", package(tmp_path), sampleset="mnist")
    with world.platform.ctx.session() as s:
        got = world.platform.reconciler.forecast_snapshot(s)
    assert got is not None and [q.key for q in got[0].queue] == []
    settle(world)
    with world.platform.ctx.session() as s:
        got = world.platform.reconciler.forecast_snapshot(s)
    assert got is not None
    assert [(q.key, q.cache_nodes) for q in got[0].queue] == [("alice/train", frozenset({"mem-0", "mem-1"}))]


def test_a_mount_failing_for_now_is_shown_and_tried_again(world: MemoryWorld) -> None:
    world.engine.volumes.trouble = "juicefs mount timed out after 20 s (see logs/node-0.log)"
    alice = world.client("alice")
    alice.create_sampleset("mnist", put_data(world, "alice", "data"))
    settle(world, 2)
    v = alice.sampleset("mnist")
    assert (
        v.phase == SampleSetPhase.PENDING
        and "mounting failed, trying again: juicefs mount timed out" in v.message
    )
    assert all(j.phase == "Pending" for j in v.jobs)  # nothing failed: it is tried again
    world.engine.volumes.trouble = None
    settle(world)
    assert alice.sampleset("mnist").phase == SampleSetPhase.READY


def test_a_sampleset_is_not_ready_while_the_warmup_after_its_sync_waits_to_run() -> None:
    """Between the sync's end and the warmup's start a job would be placed without the cache."""
    from paddlecloud.controller.loop.sampleset_loop import derive_phase
    from paddlecloud.store.tables import SampleJobRow

    def job(kind: str, phase: SampleJobPhase) -> SampleJobRow:
        return SampleJobRow(kind=kind, phase=phase, path="", message="")

    synced = job("sync", SampleJobPhase.SUCCEEDED)
    assert derive_phase([synced, job("warmup", SampleJobPhase.PENDING)]) == (
        SampleSetPhase.SYNCING,
        "warmup waiting to run",
    )
    assert derive_phase([synced, job("warmup", SampleJobPhase.SUCCEEDED)]) == (SampleSetPhase.READY, "")
    assert derive_phase([synced, job("clear", SampleJobPhase.PENDING)])[0] == SampleSetPhase.READY
    assert derive_phase([job("sync", SampleJobPhase.PENDING)])[0] == SampleSetPhase.PENDING  # first sync
