"""The rendezvous key of a job (``PADDLECLOUD_RDZV_KEY``, ``runtime.torchelastic``) is one per job for
its whole life: chosen by the backend when the job starts and kept in the backend's own record of the
job, so that a trainer started after a server restart (re-adoption) signs and verifies the
rendezvous state with the same key as the survivors. The job token cannot serve: the server issues a
fresh one at every start and re-adoption. (The Kubernetes backend keeps it in the job's Secret:
tests/kube/test_backend.py; the worker env: test_core_envcontract.py, test_kube_objects.py.)"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from paddlecloud.backends.base import JobLaunch
from paddlecloud.backends.local import LocalBackend, LocalConfig
from paddlecloud.backends.slurm.job_record import JobRecord, read_record, write_record
from paddlecloud.core.envcontract import ApiAccess
from paddlecloud.scheduler import WorkerPlacement


def launch(token: str, **kw: Any) -> JobLaunch:
    fields: dict[str, Any] = dict(
        key="alice/el", user="alice", name="el", framework="torch", entry="torchrun train.py",
        package=Path("/no/such/package.tar.gz"), output_dir=Path("/unused"),
        placement=(WorkerPlacement("trainer", 0, "node-0"), WorkerPlacement("trainer", 1, "node-0")),
        trainer_range=(1, 4), api=ApiAccess("http://127.0.0.1:9", token),
    )  # fmt: skip
    fields.update(kw)
    return JobLaunch(**fields)


def local(root: Path) -> LocalBackend:
    return LocalBackend(LocalConfig(root=root, isolation="none"), time.time, lambda: None)


def test_the_local_backend_keeps_the_key_across_a_server_restart(tmp_path: Path) -> None:
    first = local(tmp_path / "cluster")
    first.start(launch("pcj_first"))  # its preparation fails (no package): the record is what counts
    key = first._jobs["alice/el"].rendezvous_key
    recorded = tmp_path / "cluster" / "jobs" / "alice" / "el" / "launch.json"
    assert len(key) == 64 and json.loads(recorded.read_text())["rendezvous_key"] == key
    first.close()

    again = local(tmp_path / "cluster")  # the server restarted: a new token, the same key
    again.adopt(launch("pcj_second"))
    assert again._jobs["alice/el"].rendezvous_key == key
    again.close()

    other = local(tmp_path / "other")
    other.start(launch("pcj_first"))
    assert other._jobs["alice/el"].rendezvous_key != key  # another job (here: platform), another key
    other.close()


def test_a_job_recorded_before_keys_gets_one_recorded_at_adoption(tmp_path: Path) -> None:
    first = local(tmp_path / "cluster")
    first.start(launch("pcj_first"))
    first.close()
    recorded = tmp_path / "cluster" / "jobs" / "alice" / "el" / "launch.json"
    data = json.loads(recorded.read_text())
    del data["rendezvous_key"]
    recorded.write_text(json.dumps(data))
    again = local(tmp_path / "cluster")
    again.adopt(launch("pcj_second"))
    key = again._jobs["alice/el"].rendezvous_key
    assert len(key) == 64 and json.loads(recorded.read_text())["rendezvous_key"] == key
    again.close()


def test_the_slurm_record_keeps_the_key(tmp_path: Path) -> None:
    job = JobRecord(launch("pcj_first"), tmp_path, {}, (4100, 4101))
    assert len(job.rendezvous_key) == 64 and job.rendezvous_key not in repr(job)
    write_record(job)
    assert read_record(launch("pcj_second"), tmp_path).rendezvous_key == job.rendezvous_key
    data = json.loads((tmp_path / "record.json").read_text())
    del data["rendezvous_key"]  # written by an earlier version
    (tmp_path / "record.json").write_text(json.dumps(data))
    assert len(read_record(launch("pcj_second"), tmp_path).rendezvous_key) == 64
