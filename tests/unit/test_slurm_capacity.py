"""What the Slurm backend counts as its own load per node (``backends.slurm.capacity``): a
rendezvous store the plan placed (``Capability.STORE_WORKER``) is ours, at the whole CPU Slurm gives
it; one the plan did not place (a launch of an older server) stays foreign, as the plan does not
hold it; a worker restarted elsewhere is counted where it was placed, not where it runs."""

from __future__ import annotations

from pathlib import Path

from paddlecloud.backends.base import RENDEZVOUS, STORE_NEED, JobLaunch
from paddlecloud.backends.slurm.capacity import requested_by_us
from paddlecloud.backends.slurm.job_record import JobRecord, WorkerRecord
from paddlecloud.core.phases import WorkerState
from paddlecloud.core.resources import Resources
from paddlecloud.scheduler import WorkerPlacement

MI = 2**20


def _job(tmp_path: Path, planned_store: bool) -> JobRecord:
    placement = [WorkerPlacement("trainer", 0, "n1")]
    if planned_store:
        placement.append(WorkerPlacement(RENDEZVOUS, 0, "n2"))
    launch = JobLaunch(
        key="alice/job", user="alice", name="job", framework="torch", entry="torchrun train.py",
        package=tmp_path / "p.tar.gz", output_dir=tmp_path / "out", placement=tuple(placement),
        trainer_range=(1, 2), resources={"trainer": Resources(500, 256 * MI), RENDEZVOUS: STORE_NEED},
    )  # fmt: skip
    workers = {
        "trainer-0": WorkerRecord("trainer", 0, "n1", 1, state=WorkerState.RUNNING, ran_on="n1"),
        "rendezvous-0": WorkerRecord(RENDEZVOUS, 0, "n2", 2, state=WorkerState.RUNNING, ran_on="n2"),
    }
    return JobRecord(launch, tmp_path, workers, (3, 2))


def test_a_planned_store_is_ours_an_unplanned_one_is_not(tmp_path: Path) -> None:
    trainer = Resources(1000, 256 * MI)  # 500m: Slurm gives a whole CPU
    assert requested_by_us([_job(tmp_path, planned_store=True)]) == {"n1": trainer, "n2": STORE_NEED}
    assert requested_by_us([_job(tmp_path, planned_store=False)]) == {"n1": trainer}


def test_a_worker_running_elsewhere_than_planned_is_not_counted_where_it_runs(tmp_path: Path) -> None:
    job = _job(tmp_path, planned_store=True)
    job.workers["trainer-0"].ran_on = "n3"  # a restart: Slurm chose n3
    assert requested_by_us([job]) == {"n2": STORE_NEED}
