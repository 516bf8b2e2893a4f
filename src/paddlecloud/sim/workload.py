"""Simulated jobs and the traces they come from.

A :class:`SimJob` is a request as a scheduler sees it (submit time, replicas, resources per
replica, elastic bounds) plus what the simulator needs to run it: the application model
(``app``, a key of the models mapping, e.g. :func:`~paddlecloud.sim.profiles.load_profiles` plus
``{"edl": ElasticCpuModel()}``), a fixed global batch, and optionally an explicit amount of work.
:func:`job_work` is the one rule for how much a job must process: ``job.work`` when the loader
fixed it, else the model's :meth:`work` at the job's global batch.

Sources
    :func:`load_pollux`
        The Pollux workloads (``name, time, application, num_replicas, batch_size``): one of the
        six measured applications at a validated batch size. Jobs are rigid as submitted
        (``min = max = num_replicas``); an elastic policy widens them with ``dataclasses.replace``.
        Work comes from the application profile.
    :func:`load_philly`
        The Microsoft Philly trace (``timestamp, duration, num_gpus, gpu_time, cluster``). Philly
        jobs have no application, so each gets one by its GPU time, the way the Pollux authors
        built their workloads from this trace: under 1 GPU-hour cifar10 or ncf, under 10
        deepspeech2 or bert, under 100 yolov3, else imagenet (the "or" alternates on the row
        number, so the choice is deterministic). The global batch is the smallest validated batch
        that gives every one of ``num_gpus`` GPUs at least ``min_local_bsz`` (the largest validated
        batch if none does; replicas are then capped at ``max_replicas``). The trace says the job
        ran ``duration`` seconds on ``num_gpus`` GPUs, so its work is
        ``duration * throughput(num_gpus GPUs packed 4 per node, batch)``: on that allocation the
        simulator reproduces the traced duration, and on any other the measured profile of its
        application gives the speed-up. ``submit_time`` is seconds after the earliest loaded
        submission; ``tenant`` is the virtual cluster.
    :func:`edl_scenario`
        One pass of the EDL report's experiment on its CPU cluster (:data:`EDL_CLUSTER`, 133 nodes):
        20 jobs of 10 pservers and 5-CPU trainers submitted ~10 s apart (seeded jitter), asking for
        2..60 trainers (autoscaling ON) or a fixed 60 (OFF), running
        :class:`~paddlecloud.sim.profiles.ElasticCpuModel` (near-linear, fixed work).
"""

from __future__ import annotations

import csv
import heapq
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from paddlecloud.core.resources import Resources
from paddlecloud.sim.profiles import (
    APPLICATIONS,
    AppProfile,
    ElasticCpuModel,
    ThroughputModel,
    load_profiles,
    packed_nodes,
)

__all__ = [
    "EDL_APP",
    "EDL_CLUSTER",
    "EDL_MAX_TRAINERS",
    "EDL_MIN_TRAINERS",
    "EDL_ROUND_S",
    "EDL_WINDOW_AFTER_LAST_S",
    "POLLUX_CLUSTER",
    "ClusterSpec",
    "SimJob",
    "edl_scenario",
    "job_work",
    "load_philly",
    "load_pollux",
    "load_pollux_dir",
    "philly_application",
    "speedup_table",
]

GIB = 2**30
#: the model key of EDL jobs
EDL_APP = "edl"
#: the report's trainer bounds: 2..60 with autoscaling, a fixed 60 without
EDL_MIN_TRAINERS, EDL_MAX_TRAINERS = 2, 60
_PHILLY_TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    """Identical nodes: how many, and what each offers."""

    nodes: int
    node: Resources

    @property
    def total(self) -> Resources:
        return self.node.times(self.nodes)


#: The paper's cluster: 16 nodes x 4 GPUs (CPU and memory are not the constraint there).
POLLUX_CLUSTER = ClusterSpec(nodes=16, node=Resources(cpu_m=64_000, memory=256 * GIB, gpu=4))
#: The EDL report's cluster (PaddlePaddle Cloud, doc/edl/experiment): 133 nodes whose allocatable
#: CPU totals ~2,330 cores. The report gives no node size; its logs give each job's share of the
#: cluster's CPU: a 60-trainer job with its 10 pservers (300 + 40 cores) 14.52 %, one with 38
#: trainers 9.80 %, so 22 trainers (110 cores) are 4.72 % and the cluster 2,330 cores, 17.5 per
#: node. Memory (64 GiB) never binds: 3 trainers of 8 GiB fill a node's CPU first.
EDL_CLUSTER = ClusterSpec(nodes=133, node=Resources(cpu_m=17_500, memory=64 * GIB, gpu=0))
#: The report's autoscaler loop period (its ``defaultLoopDur``): the EDL scenario's round length.
EDL_ROUND_S = 5.0
#: The report's script kills every job this long after the last submission (``sleep 300``); its
#: pending times and CPU utilisation are measured up to then.
EDL_WINDOW_AFTER_LAST_S = 300.0


@dataclass(frozen=True, slots=True)
class SimJob:
    """One job of a simulated workload.

    ``num_replicas`` is what was asked for; an elastic job may run with any count in
    ``[min_replicas, max_replicas]`` (0 means "= num_replicas", as in the scheduler's
    ``JobRequest``). ``global_bsz`` stays fixed whatever the replica count (``adaptive`` jobs: where
    they start, see ``sim.adaptive``). ``work`` (samples) is set by loaders whose jobs carry their
    own size; None means the model's ``work(global_bsz)``.
    ``trace_duration`` is the traced run time (Philly) on ``num_replicas`` replicas.
    """

    name: str
    submit_time: float
    app: str
    num_replicas: int
    global_bsz: int
    gpus_per_replica: int = 1
    cpu_m_per_replica: int = 0
    memory_per_replica: int = 0
    min_replicas: int = 0
    max_replicas: int = 0
    work: float | None = None
    trace_duration: float | None = None
    tenant: str = ""
    #: parameter servers: a fixed count for the job's whole life, started with it (0: none)
    pservers: int = 0
    cpu_m_per_pserver: int = 0
    memory_per_pserver: int = 0
    #: adaptive-batch jobs (``sim.adaptive``): the global batch bounds ``(lo, hi)`` the scheduler may
    #: choose in; ``global_bsz`` is where the job starts and the unit of its progress. None: fixed
    adaptive: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        if self.num_replicas < 1:
            raise ValueError(f"{self.name}: num_replicas must be >= 1, got {self.num_replicas}")
        if self.global_bsz < 1:
            raise ValueError(f"{self.name}: global_bsz must be >= 1, got {self.global_bsz}")
        if self.min_replicas < 0 or self.max_replicas < 0:
            raise ValueError(f"{self.name}: replica bounds must be >= 0")
        if not self.lo <= self.num_replicas <= self.hi:
            raise ValueError(
                f"{self.name}: need min_replicas <= num_replicas <= max_replicas, "
                f"got {self.lo} <= {self.num_replicas} <= {self.hi}"
            )
        if self.work is not None and self.work <= 0:
            raise ValueError(f"{self.name}: work must be > 0, got {self.work}")
        if self.pservers < 0:
            raise ValueError(f"{self.name}: pservers must be >= 0, got {self.pservers}")
        if self.adaptive is not None and not 1 <= self.adaptive[0] <= self.global_bsz <= self.adaptive[1]:
            raise ValueError(f"{self.name}: need 1 <= lo <= global_bsz <= hi, got {self.adaptive}")

    @property
    def lo(self) -> int:
        return self.min_replicas or self.num_replicas

    @property
    def hi(self) -> int:
        return self.max_replicas or self.num_replicas

    @property
    def elastic(self) -> bool:
        return self.hi > self.lo

    @property
    def replica(self) -> Resources:
        """Resources of one replica."""
        return Resources(
            cpu_m=self.cpu_m_per_replica, memory=self.memory_per_replica, gpu=self.gpus_per_replica
        )

    @property
    def pserver(self) -> Resources:
        """Resources of one parameter server."""
        return Resources(cpu_m=self.cpu_m_per_pserver, memory=self.memory_per_pserver)


def job_work(job: SimJob, models: Mapping[str, ThroughputModel]) -> float:
    """Samples ``job`` must process: its own ``work`` if set, else its model's at its global batch."""
    if job.work is not None:
        return job.work
    return _model(job, models).work(job.global_bsz)


def speedup_table(
    model: ThroughputModel, global_bsz: float, max_replicas: int, gpus_per_node: int = 4
) -> tuple[float, ...]:
    """Throughput on ``n`` packed replicas relative to one, for ``n = 1..max_replicas``.

    The shape of the scheduler's ``JobRequest.speedup``.
    """
    base = model.throughput(1, 1, global_bsz)
    return tuple(
        model.throughput(n, packed_nodes(n, gpus_per_node), global_bsz) / base
        for n in range(1, max_replicas + 1)
    )


def _model(job: SimJob, models: Mapping[str, ThroughputModel]) -> ThroughputModel:
    try:
        return models[job.app]
    except KeyError:
        raise KeyError(f"{job.name}: no model for application {job.app!r}") from None


# ----------------------------------------------------------------------------------------- Pollux


def load_pollux(path: str | Path) -> list[SimJob]:
    """Jobs of one Pollux workload CSV, in submission order (ties keep file order)."""
    jobs: list[SimJob] = []
    with Path(path).open(newline="") as f:
        for row in csv.DictReader(f):
            app = row["application"]
            if app not in APPLICATIONS:
                raise ValueError(f"{path}: job {row['name']!r} has unknown application {app!r}")
            jobs.append(
                SimJob(
                    name=row["name"],
                    submit_time=float(row["time"]),
                    app=app,
                    num_replicas=int(row["num_replicas"]),
                    global_bsz=int(row["batch_size"]),
                )
            )
    jobs.sort(key=lambda j: j.submit_time)
    return jobs


def load_pollux_dir(folder: str | Path) -> dict[str, list[SimJob]]:
    """Every ``workload-*.csv`` in ``folder``, keyed by file stem (``workload-1``...)."""
    return {p.stem: load_pollux(p) for p in sorted(Path(folder).glob("workload-*.csv"))}


# ----------------------------------------------------------------------------------------- Philly


def philly_application(gpu_time: float, row: int) -> str:
    """The application a Philly job stands for, by GPU time (seconds) and its row number."""
    hours = gpu_time / 3600.0
    if hours < 1:
        return "cifar10" if row % 2 == 0 else "ncf"
    if hours < 10:
        return "deepspeech2" if row % 2 == 0 else "bert"
    if hours < 100:
        return "yolov3"
    return "imagenet"


def _philly_rows(path: Path) -> Iterator[tuple[str, int, dict[str, str]]]:
    """``(timestamp, row number, row)``; the fixed-width timestamps sort like the times they spell."""
    with path.open(newline="") as f:
        for i, row in enumerate(csv.DictReader(f)):
            yield row["timestamp"], i, row


def _philly_batch(profile: AppProfile, gpus: int) -> int:
    for b in profile.batch_sizes:
        if b >= profile.min_local_bsz * gpus - 1e-9:
            return b
    return profile.max_batch_size


def load_philly(
    path: str | Path,
    limit: int | None = None,
    *,
    profiles: Mapping[str, AppProfile] | None = None,
    gpus_per_node: int = 4,
) -> list[SimJob]:
    """Philly jobs (the ``limit`` earliest submissions, or all), in submission order.

    Streams the file and keeps at most ``limit`` rows. ``profiles`` defaults to the Pollux traces in
    the shared data layout (``<data>/pollux/traces`` beside ``<data>/philly/philly.csv``).
    """
    src = Path(path)
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if profiles is None:
        profiles = load_profiles(src.resolve().parent.parent / "pollux" / "traces")
    if limit is None:
        picked = sorted(_philly_rows(src), key=lambda t: (t[0], t[1]))
    else:
        picked = heapq.nsmallest(limit, _philly_rows(src), key=lambda t: (t[0], t[1]))
    if not picked:
        return []
    start = datetime.strptime(picked[0][0], _PHILLY_TIME_FORMAT)
    jobs: list[SimJob] = []
    for text, i, row in picked:
        stamp = datetime.strptime(text, _PHILLY_TIME_FORMAT)
        duration = float(row["duration"])
        gpus = int(float(row["num_gpus"]))
        app = philly_application(float(row["gpu_time"]), i)
        profile = profiles[app]
        bsz = _philly_batch(profile, gpus)
        replicas = min(gpus, profile.max_replicas(bsz))
        rate = profile.throughput(replicas, packed_nodes(replicas, gpus_per_node), bsz)
        jobs.append(
            SimJob(
                name=f"philly-{i}",
                submit_time=(stamp - start).total_seconds(),
                app=app,
                num_replicas=replicas,
                global_bsz=bsz,
                work=max(duration, 1.0) * rate,
                trace_duration=duration,
                tenant=row["cluster"],
            )
        )
    return jobs


# -------------------------------------------------------------------------------------------- EDL


def edl_scenario(
    seed: int = 0,
    autoscaling: bool = True,
    jobs: int = 20,
    model: ElasticCpuModel | None = None,
) -> list[SimJob]:
    """One pass of the EDL report's experiment: ``jobs`` CPU training jobs submitted ~10 s apart.

    As in the report's script (``case1.sh``, ``run.sh``): each job has 10 pservers of 4 CPU / 5 GiB
    and trainers of 5 CPU / 8 GiB; with ``autoscaling`` it asks for 2..60 trainers and starts at 2,
    without it for a fixed 60. Submissions are ``sleep 10`` plus the time the submit commands took:
    each gap is 10 s plus a uniform 0-5 s drawn from ``seed`` (the report's logs show gaps of 7-14 s,
    12.6 s on average), so passes differ as the report's ten passes did. The work is the model's
    fixed ``work_samples`` (no job finishes inside the report's window); ``global_bsz`` is nominal
    (EDL trainers keep their own batch).
    """
    m = model if model is not None else ElasticCpuModel()
    rng = random.Random(seed)
    lo, hi = (EDL_MIN_TRAINERS, EDL_MAX_TRAINERS) if autoscaling else (0, 0)
    asked = EDL_MIN_TRAINERS if autoscaling else EDL_MAX_TRAINERS
    out, t = [], 0.0
    for k in range(jobs):
        out.append(
            SimJob(
                name=f"edl-{k}", submit_time=round(t, 3), app=EDL_APP, num_replicas=asked,
                global_bsz=256, gpus_per_replica=0, cpu_m_per_replica=5_000,
                memory_per_replica=8 * GIB, min_replicas=lo, max_replicas=hi, work=m.work_samples,
                pservers=10, cpu_m_per_pserver=4_000, memory_per_pserver=5 * GIB,
            )
        )  # fmt: skip
        t += 10.0 + rng.uniform(0.0, 5.0)
    return out
