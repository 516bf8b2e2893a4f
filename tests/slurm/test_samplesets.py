"""SampleSets on the Slurm backend against the real private cluster and real JuiceFS mounts: the
whole lifecycle in one test (the Slurm suite is slow already). The server formats the volume and
syncs through its admin mount; warmup and clear run as Slurm jobs on the nodes and fill / empty
each node's node-local cache; a 2-worker job on n1 and n2 mounts the SampleSet per run on its node
and reads every file at PADDLECLOUD_SAMPLESET_DIR, read-only; rmr removes a path; delete leaves no
mount and no file, on the server's side or the nodes'. The command building and the node side
without Slurm: tests/unit/test_slurm_samplesets.py."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from paddlecloud.backends.base import Capability, JobLaunch
from paddlecloud.backends.samplesets import (
    SampleSetRef,
    SampleTask,
    SampleTaskKind,
    SampleTaskState,
    SampleTaskStatus,
)
from paddlecloud.backends.slurm import SlurmBackend, SlurmSettings
from paddlecloud.backends.slurm.commands import queue
from paddlecloud.backends.slurm.samplesets import SlurmSampleSets
from paddlecloud.core.envcontract import ApiAccess
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import WorkerPlacement
from paddlecloud.storage.juicefs import cached_bytes, mounts_under
from tests.e2e.juicefs_fixtures import digests, make_tree, reader_package, run_to_success, unmounted_after

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(600)]

MiB = 1 << 20
NODES = ("n1", "n2")


def _run(
    sets: SlurmSampleSets, ref: SampleSetRef, task: SampleTask, timeout: float = 180
) -> SampleTaskStatus:
    sets.start_task(ref, task)
    deadline = time.monotonic() + timeout
    while (st := sets.task_status(ref, task.id)).state == SampleTaskState.RUNNING:
        assert time.monotonic() < deadline, f"{task} still running: {st}"
        time.sleep(0.3)
    assert st.state == SampleTaskState.SUCCEEDED, st.message
    return st


def test_sampleset_lifecycle_on_slurm_nodes(slurm: dict[str, str], tmp_path: Path) -> None:
    local = tmp_path / "node-local"  # each emulated node's disk: <local>/nodes/<node>/ below it
    backend = SlurmBackend(
        SlurmSettings(root=tmp_path / "slurm", node_cache=local, cleanup_grace=1), time.time, lambda: None
    )
    sets = backend.samplesets
    assert Capability.SAMPLESETS in backend.capabilities
    want = make_tree(tmp_path / "src", small=12, big=MiB)
    total = sum((tmp_path / "src" / p).stat().st_size for p in want)
    ref = SampleSetRef(key="alice/ss-1", owner="alice", name="imgs", uid="ss-1", source=tmp_path / "src",
                       cache_size=64 * MiB, nodes=NODES)  # fmt: skip
    with unmounted_after(tmp_path):
        try:
            sets.ensure(ref)
            st = _run(sets, ref, SampleTask("sj-1", SampleTaskKind.SYNC))
            assert (st.done, st.total) == (total, total)
            assert (sets.status(ref).files, sets.status(ref).bytes) == (len(want), total)
            assert mounts_under(local) == []  # nothing on the nodes yet: the server syncs

            # warmup: a Slurm job per node fills that node's node-local cache
            st = _run(sets, ref, SampleTask("sj-2", SampleTaskKind.WARMUP))
            assert (st.done, st.total) == (2 * total, 2 * total)
            caches = {n.node: n for n in sets.status(ref).nodes}
            assert set(caches) == set(NODES)
            for node in NODES:
                on_disk = cached_bytes(sets.paths.cache(node, ref.uid))
                assert total <= caches[node].cached_bytes == on_disk <= total * 1.1, caches[node]
                assert caches[node].mounted
            assert mounts_under(local) == []  # the warmup jobs unmounted when they ended

            # a job of 2 workers on n1 and n2 reads every file, read-only, on the planned nodes
            out = tmp_path / "out"
            launch = JobLaunch(
                key="alice/reader", user="alice", name="reader", framework="none", entry="python read.py",
                package=reader_package(tmp_path / "reader.tar.gz"), output_dir=out,
                placement=(WorkerPlacement("trainer", 0, "n1"), WorkerPlacement("trainer", 1, "n2")),
                api=ApiAccess("http://127.0.0.1:9", "pcj_test"), sampleset=ref,
                resources={"trainer": Resources(1000, 256 * MiB)},
                package_path="/pfs/local/home/alice/jobs/reader/package.tar.gz",
            )  # fmt: skip
            run_to_success(backend, launch)
            for i, node in enumerate(NODES):
                got = json.loads((out / f"trainer-{i}.json").read_text())
                run = sets.run_name("alice", "reader", f"trainer-{i}", 0)
                assert (got["node"], got["root"]) == (node, str(sets.paths.mountpoint(run)))
                assert got["files"] == want
                assert got["write"] == "EROFS"
            # the launcher's exit ends the worker; its batch job then keeps the blocks and unmounts
            ids = [w.slurm_id for w in backend._jobs[launch.key].workers.values() if w.slurm_id]
            deadline = time.monotonic() + 60
            while not all(j.ended for j in queue(ids, 30).values()):
                assert time.monotonic() < deadline, "the workers' Slurm jobs did not end"
                time.sleep(0.3)
            assert mounts_under(local) == [] and list((local / "runs").glob("*.owner")) == []
            for node in NODES:  # the runs read from the warm cache, which they kept
                assert cached_bytes(sets.paths.cache(node, ref.uid)) == caches[node].cached_bytes
            backend.forget(launch.key)

            # clear: every node's cache emptied, on the node
            _run(sets, ref, SampleTask("sj-3", SampleTaskKind.CLEAR))
            assert [(n.node, n.cached_bytes) for n in sets.status(ref).nodes] == [("n1", 0), ("n2", 0)]
            assert all(cached_bytes(sets.paths.cache(node, ref.uid)) == 0 for node in NODES)

            # rmr: a path gone from the volume
            _run(sets, ref, SampleTask("sj-4", SampleTaskKind.RMR, "part-1"))
            left = {p: d for p, d in want.items() if not p.startswith("part-1/")}
            assert sets.status(ref).files == len(left)
            assert digests(sets.admin(ref.uid)) == left

            # a node Slurm does not know: the task fails with Slurm's words, the other node's job stopped
            bad = dataclasses.replace(ref, nodes=("n1", "n9"))
            sets.start_task(bad, SampleTask("sj-5", SampleTaskKind.WARMUP))
            deadline = time.monotonic() + 60
            while (st := sets.task_status(bad, "sj-5")).state == SampleTaskState.RUNNING:
                assert time.monotonic() < deadline
                time.sleep(0.2)
            assert st.state == SampleTaskState.FAILED, st
            assert "invalid node name" in st.message.lower(), st.message

            # delete: no mount and no file left, here or on the nodes
            sets.delete(ref)  # (other sessions' mounts elsewhere on the machine are not counted)
            assert mounts_under(tmp_path) == []
            assert not sets.folder(ref.uid).exists()
            assert not any((local / "nodes" / node / ref.uid).exists() for node in NODES)
            assert [p.name for p in (local / "runs").iterdir()] == [".sweep"]
        finally:
            backend.close()
    assert mounts_under(tmp_path) == []
