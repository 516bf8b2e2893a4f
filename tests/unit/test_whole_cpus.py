"""A backend whose engine allocates whole CPUs (``Capability.WHOLE_CPUS``: Slurm) has every worker
planned and counted at its CPU rounded up (issue 25: two 500m pservers and a ``--cpu 3`` trainer
were planned onto one 4-CPU node; Slurm gave each pserver a CPU and the trainer stayed pending)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from memory_platform import MemoryWorld
from sqlalchemy import select

from paddlecloud.api.errors import PaddleCloudError
from paddlecloud.backends.base import Capability, NodeInfo
from paddlecloud.backends.memory.backend import ALL
from paddlecloud.core.resources import Resources
from paddlecloud.store.tables import JobRow

pytestmark = pytest.mark.timeout(60)

GI = 2**30
NODES = (NodeInfo("n1", Resources(4000, 8 * GI)), NodeInfo("n2", Resources(4000, 8 * GI)))
PS_AND_BIG_TRAINER = {"pservers": {"count": 2, "cpu": "500m"}, "trainers": {"count": 1, "cpu": "3"}}


def _package(tmp_path: Path) -> Path:
    package = tmp_path / "pkg"
    package.mkdir(exist_ok=True)
    (package / "train.py").write_text("print('unused')\n")
    return package


def _started(tmp_path: Path, caps: frozenset[Capability], spec: dict[str, Any]) -> MemoryWorld:
    """A world on ``NODES`` with ``caps``, where alice's job ``job`` of ``spec`` was admitted."""
    world = MemoryWorld(tmp_path, capabilities=caps, nodes=NODES)
    try:
        alice = world.client("alice")
        world.submit(alice, "job", _package(tmp_path), **spec)
        world.tick()
        assert world.job(alice, "job").phase in ("Starting", "Running")
    except BaseException:
        world.close()
        raise
    return world


def _held_per_node(world: MemoryWorld, cpus: dict[str, int]) -> dict[str, int]:
    """CPU millicores per node of the job's placement, each worker at ``cpus[role]``."""
    with world.platform.ctx.session() as s:
        row = s.scalars(select(JobRow).where(JobRow.name == "job")).one()
        held: dict[str, int] = {}
        for p in row.placement or []:
            held[p["node"]] = held.get(p["node"], 0) + cpus[p["role"]]
        return held


@pytest.mark.parametrize("whole", [True, False], ids=["whole-cpus", "millicores"])
def test_the_plan_holds_what_the_engine_allocates(tmp_path: Path, whole: bool) -> None:
    caps = ALL | {Capability.WHOLE_CPUS} if whole else ALL
    world = _started(tmp_path, caps, PS_AND_BIG_TRAINER)
    try:
        slurm = _held_per_node(world, {"pserver": 1000, "trainer": 3000})  # what Slurm gives them
        planned = _held_per_node(world, {"pserver": 500, "trainer": 3000})
        assert max(planned.values()) <= 4000
        if whole:  # never more on a node than Slurm will allocate there
            assert max(slurm.values()) <= 4000, slurm
        else:  # millicores: the three fit one node, and are packed there
            assert slurm == {"n1": 5000} or slurm == {"n2": 5000}, slurm
    finally:
        world.close()


def test_a_job_no_node_holds_in_whole_cpus_is_refused_at_submit(tmp_path: Path) -> None:
    one = (NODES[0],)
    world = MemoryWorld(tmp_path, capabilities=ALL | {Capability.WHOLE_CPUS}, nodes=one)
    try:
        alice = world.client("alice")
        with pytest.raises(PaddleCloudError) as refused:  # 2 + 3 CPUs on a 4-CPU node
            world.submit(alice, "job", _package(tmp_path), **PS_AND_BIG_TRAINER)
        assert refused.value.code == "exceeds_capacity", refused.value
    finally:
        world.close()
    world = MemoryWorld(tmp_path / "millicores", nodes=one)  # 1 + 3 CPUs: it fits
    try:
        alice = world.client("alice")
        world.submit(alice, "job", _package(tmp_path), **PS_AND_BIG_TRAINER)
        world.tick()
        assert world.job(alice, "job").phase in ("Starting", "Running")
    finally:
        world.close()


ELASTIC_TORCH = {"framework": "torch", "trainers": {"count": 4, "min": 1, "max": 4, "cpu": "2"}}


@pytest.mark.parametrize("store_worker", [True, False], ids=["store-worker", "no-store-worker"])
def test_an_elastic_torch_jobs_store_is_planned_where_it_runs(tmp_path: Path, store_worker: bool) -> None:
    """Slurm runs an elastic torch job's rendezvous store as a job of one CPU (``STORE_WORKER``):
    the plan leaves room for it beside the trainers (issue 25: planned without it, 4 trainers of
    2 CPUs filled 2 x 4 CPUs, the store took one and a trainer waited until the others ended), and
    the launch names its placement ``rendezvous``. Backends whose store costs nothing plan none."""
    caps = ALL | {Capability.WHOLE_CPUS} | ({Capability.STORE_WORKER} if store_worker else set())
    world = _started(tmp_path, caps, ELASTIC_TORCH)
    try:
        held = _held_per_node(world, {"pserver": 1000, "trainer": 2000})
        roles = _planned_roles(world)
        if store_worker:  # 3 trainers and the store: what Slurm gives them fits the nodes
            assert sorted(roles) == ["pserver", "trainer", "trainer", "trainer"], roles
            assert max(held.values()) <= 4000 and sum(held.values()) == 7000, held
            launch = world.engine.jobs["alice/job"].launch  # the backend is told it is the store
            assert sorted(p.role for p in launch.placement) == ["rendezvous", "trainer", "trainer", "trainer"]
            assert launch.resources["rendezvous"].cpu_m == 1000
            # the job's workers are the backend's: a rendezvous-0, never a pserver-0 left Pending
            assert sorted(_worker_names(world)) == ["rendezvous-0", "trainer-0", "trainer-1", "trainer-2"]
        else:
            assert sorted(roles) == ["trainer"] * 4, roles
    finally:
        world.close()


def _planned_roles(world: MemoryWorld) -> list[str]:
    with world.platform.ctx.session() as s:
        row = s.scalars(select(JobRow).where(JobRow.name == "job")).one()
        return [str(p["role"]) for p in row.placement or []]


def _worker_names(world: MemoryWorld) -> list[str]:
    with world.platform.ctx.session() as s:
        row = s.scalars(select(JobRow).where(JobRow.name == "job")).one()
        return [w.name for w in row.workers]
