"""The ``SlurmBackend`` against the real private Slurm cluster (``scripts/ensure-slurm.sh``): a job of
1 pserver + 2 trainers runs one Slurm job per worker on the planned nodes with the env contract,
pservers first; sync reports Running then Succeeded; stop leaves nothing in squeue or on the nodes;
logs per run with --previous; a killed node's worker is restarted elsewhere and the job finishes;
a new backend object adopts a running job; nodes() sees other users' load."""

from __future__ import annotations

import json
import re
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from paddlecloud.backends.base import RENDEZVOUS, STORE_NEED, Capability, JobLaunch, JobStatus, LogRequest
from paddlecloud.backends.slurm import SlurmBackend
from paddlecloud.core.phases import WorkerState
from paddlecloud.core.resources import Resources
from paddlecloud.core.restarts import RestartPolicy, RestartRules
from paddlecloud.scheduler import WorkerPlacement
from tests.e2e.juicefs_fixtures import tar_package

pytestmark = pytest.mark.slurm

MI = 2**20
#: each worker prints its env contract as one JSON line; pservers listen on their port until stopped;
#: trainers sleep SLEEP seconds and exit with FAIL_FIRST on their first run
WORK = """
import json, os, socket, sys, time
e = os.environ
print(json.dumps({k: e.get(k, "") for k in (
    "PADDLECLOUD_WORKER", "PADDLECLOUD_PSERVER_ENDPOINTS", "PADDLECLOUD_TRAINER_ENDPOINTS",
    "PADDLECLOUD_CURRENT_ENDPOINT", "PADDLECLOUD_RESTART", "SLURMD_NODENAME")} | {"t": time.time()}),
    flush=True)
if e["PADDLECLOUD_ROLE"] == "pserver":
    host, _, port = e["PADDLECLOUD_CURRENT_ENDPOINT"].rpartition(":")
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, int(port)))
    s.listen()
    time.sleep(600)
time.sleep(float(e.get("SLEEP", "1")))
if e["PADDLECLOUD_RESTART"] == "0" and e.get("FAIL_FIRST"):
    sys.exit(int(e["FAIL_FIRST"]))
print("trainer done", flush=True)
"""


#: a worker of a package with requirements: it runs in the job's environment, with the runtime
ENV_WORK = """
import sys, six, paddlecloud.runtime.membership
print("prefix", sys.prefix, flush=True)
print("six ok", flush=True)
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tar_package(tmp_path_factory.mktemp("pkg") / "package.tar.gz", {"work.py": WORK})


def launch(package: Path, tmp: Path, nodes: tuple[str, ...] = ("n1", "n2", "n3"), **kw: Any) -> JobLaunch:
    name = f"job{uuid.uuid4().hex[:6]}"
    pservers = kw.pop("pservers", 1)
    placement = [WorkerPlacement("pserver", i, nodes[i % len(nodes)]) for i in range(pservers)]
    placement += [WorkerPlacement("trainer", i, nodes[(pservers + i) % len(nodes)]) for i in range(2)]
    defaults: dict[str, Any] = dict(
        key=f"alice/{name}", user="alice", name=name, framework="none", entry="python work.py",
        package=package, output_dir=tmp / "output", placement=tuple(placement),
        resources={"pserver": Resources(1000, 256 * MI), "trainer": Resources(1000, 256 * MI)},
    )  # fmt: skip
    defaults.update(kw)
    return JobLaunch(**defaults)


def store_launch(package: Path, tmp: Path) -> JobLaunch:
    """An elastic torch job of 2 trainers on n1 (sleeping 300 s) whose store the plan placed on n3."""
    trainers = [WorkerPlacement("trainer", i, "n1") for i in range(2)]
    return launch(
        package, tmp, framework="torch", trainer_range=(1, 2), env={"SLEEP": "300"},
        placement=(WorkerPlacement(RENDEZVOUS, 0, "n3"), *trainers),
        resources={"trainer": Resources(1000, 256 * MI), RENDEZVOUS: STORE_NEED},
    )  # fmt: skip


def sync_until(
    b: SlurmBackend, key: str, cond: Callable[[JobStatus], bool], timeout: float = 60
) -> list[JobStatus]:
    seen = []
    deadline = time.monotonic() + timeout
    while True:
        st = b.sync(key)
        seen.append(st)
        if cond(st):
            return seen
        assert time.monotonic() < deadline, f"not within {timeout} s: {st}"
        time.sleep(0.3)


def states(st: JobStatus) -> dict[str, WorkerState]:
    return {w.name: w.state for w in st.workers}


def contract_lines(b: SlurmBackend, key: str, worker: str, previous: bool = False) -> list[dict[str, Any]]:
    text = b"".join(b.read_log(LogRequest(key, (worker,), previous=previous))).decode()
    return [json.loads(ln) for ln in text.splitlines() if ln.startswith("{")]


def slurm_ids(b: SlurmBackend, key: str) -> list[int]:
    return [w.slurm_id for w in b._jobs[key].workers.values() if w.slurm_id is not None]


def active_in_squeue(ids: list[int]) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-o", "%i %T"], capture_output=True, text=True, check=True).stdout
    return [ln for ln in out.splitlines() if int(ln.split()[0]) in ids]


def test_pservers_first_env_contract_on_planned_nodes_then_succeeded(
    backend: SlurmBackend, package: Path, tmp_path: Path
) -> None:
    job = launch(package, tmp_path, env={"SLEEP": "2"})
    backend.start(job)
    seen = sync_until(backend, job.key, lambda s: s.finished, timeout=90)
    last = seen[-1]
    assert last.failure is None, last.failure
    ended = {"pserver-0": WorkerState.STOPPED, "trainer-0": WorkerState.SUCCEEDED}
    assert states(last) == ended | {"trainer-1": WorkerState.SUCCEEDED}
    running = [s for s in seen if set(states(s).values()) == {WorkerState.RUNNING}]
    assert running, "never saw every worker Running"
    ps = contract_lines(backend, job.key, "pserver-0")[0]
    trainers = [contract_lines(backend, job.key, f"trainer-{i}")[0] for i in range(2)]
    assert ps["SLURMD_NODENAME"] == "n1"
    assert [t["SLURMD_NODENAME"] for t in trainers] == ["n2", "n3"]
    ps_endpoint = ps["PADDLECLOUD_CURRENT_ENDPOINT"]
    for i, t in enumerate(trainers):
        assert t["PADDLECLOUD_PSERVER_ENDPOINTS"] == ps_endpoint
        eps = t["PADDLECLOUD_TRAINER_ENDPOINTS"].split(",")
        assert len(eps) == 2 and len({*eps, ps_endpoint}) == 3  # hosts with ports that never collide
        assert t["PADDLECLOUD_CURRENT_ENDPOINT"] == eps[i]
        assert t["t"] > ps["t"], "a trainer started before the pserver"
    assert not active_in_squeue(slurm_ids(backend, job.key))
    assert job.output_dir.is_dir()


def test_stop_cancels_everything(backend: SlurmBackend, package: Path, tmp_path: Path) -> None:
    job = launch(package, tmp_path, env={"SLEEP": "300"})
    backend.start(job)
    sync_until(backend, job.key, lambda s: states(s).get("trainer-1") == WorkerState.RUNNING)
    ids = slurm_ids(backend, job.key)
    t0 = time.monotonic()
    backend.stop(job.key, 2)
    took = time.monotonic() - t0
    assert not active_in_squeue(ids)
    st = backend.sync(job.key)
    assert st.finished and set(states(st).values()) == {WorkerState.STOPPED}
    ps = subprocess.run(["ps", "-eo", "args="], capture_output=True, text=True, check=True).stdout
    assert job.name not in ps and str(backend.root) not in ps
    print(f"stop took {took:.1f} s")


def test_logs_per_run_and_previous_after_a_restart(
    backend: SlurmBackend, package: Path, tmp_path: Path
) -> None:
    rules = RestartRules(trainer=RestartPolicy.ON_FAILURE, backoff_s=0.1, max_restarts=3)
    job = launch(package, tmp_path, pservers=0, env={"FAIL_FIRST": "3"}, restarts=rules)
    backend.start(job)
    seen = sync_until(backend, job.key, lambda s: s.finished, timeout=90)
    assert seen[-1].failure is None, seen[-1].failure
    assert any(e.reason == "WorkerRestarting" for s in seen for e in s.events)
    previous = contract_lines(backend, job.key, "trainer-0", previous=True)
    current = contract_lines(backend, job.key, "trainer-0")
    assert [p["PADDLECLOUD_RESTART"] for p in previous] == ["0"]
    assert [c["PADDLECLOUD_RESTART"] for c in current] == ["1"]
    assert {w.name: w.restarts for w in seen[-1].workers} == {"trainer-0": 1, "trainer-1": 1}


def test_killed_node_its_worker_restarts_elsewhere_and_the_job_finishes(
    backend: SlurmBackend, package: Path, tmp_path: Path, slurm_sh: Callable[..., Any]
) -> None:
    rules = RestartRules(trainer=RestartPolicy.ON_FAILURE, backoff_s=0.1, max_restarts=3)
    job = launch(package, tmp_path, pservers=0, nodes=("n2", "n3"), env={"SLEEP": "6"}, restarts=rules)
    backend.start(job)
    sync_until(backend, job.key, lambda s: states(s).get("trainer-1") == WorkerState.RUNNING)
    try:
        slurm_sh("kill-node", "n3")
        seen = sync_until(backend, job.key, lambda s: s.finished, timeout=120)
        down = {n.name: n for n in backend.nodes()}["n3"]  # not used again until it is back
        assert down.capacity == Resources() and "takes no work" in down.note, down
    finally:
        slurm_sh("revive-node", "n3")
    back = {n.name: n for n in backend.nodes()}["n3"]
    assert back.capacity.cpu_m == 4000 and not back.note, back
    last = seen[-1]
    assert last.failure is None, last.failure
    restarted = [e.message for s in seen for e in s.events if e.reason == "WorkerRestarting"]
    assert len(restarted) == 1 and "trainer-1" in restarted[0] and "NODE_FAIL" in restarted[0], restarted
    t1 = {w.name: w for w in last.workers}["trainer-1"]
    assert t1.state == WorkerState.SUCCEEDED and t1.node != "n3" and t1.restarts == 1
    runs = contract_lines(backend, job.key, "trainer-1")
    assert runs[0]["SLURMD_NODENAME"] != "n3"


def _runtime_files(b: SlurmBackend) -> dict[str, tuple[int, int]]:
    """The runtime shim the workers import their launcher from: each file's inode and mtime."""
    shim = b.root / "pythonpath"
    return {
        str(p.relative_to(shim)): (p.stat().st_ino, p.stat().st_mtime_ns)
        for p in shim.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def test_a_new_backend_adopts_a_running_job(
    slurm: dict[str, str], backend: SlurmBackend, package: Path, tmp_path: Path
) -> None:
    job = launch(package, tmp_path, env={"SLEEP": "4"})
    backend.start(job)
    sync_until(backend, job.key, lambda s: states(s).get("trainer-0") == WorkerState.RUNNING)
    runtime = _runtime_files(backend)
    again = SlurmBackend(backend.settings, time.time, lambda: None)
    # what the trainers, RUNNING for Slurm, may still be importing their launcher from: a new
    # backend once deleted and copied it, and a trainer starting in between was Lost
    assert _runtime_files(again) == runtime
    again.adopt(job)
    first = again.sync(job.key)
    assert any(e.reason == "Adopted" for e in first.events)
    assert states(first)["pserver-0"] == WorkerState.RUNNING  # runs until the trainers are done
    # a 4 s trainer may have ended before the adoption on a loaded machine: then it reads as ended
    assert states(first)["trainer-0"] in (WorkerState.RUNNING, WorkerState.SUCCEEDED), first
    seen = sync_until(again, job.key, lambda s: s.finished, timeout=60)
    last = seen[-1]
    assert last.failure is None and states(last)["trainer-1"] == WorkerState.SUCCEEDED
    codes = {w.name: w.exit_code for w in last.workers if w.role == "trainer"}
    assert codes == {"trainer-0": 0, "trainer-1": 0}  # from the launchers' status files
    assert not active_in_squeue(slurm_ids(again, job.key))
    backend._jobs.clear()  # the adopter owns it now


def test_workers_that_ended_before_the_adoption_read_as_ended_with_their_exit_status(
    backend: SlurmBackend, package: Path, tmp_path: Path
) -> None:
    job = launch(package, tmp_path, env={"SLEEP": "0"}, pservers=0)
    backend.start(job)  # the trainers submitted; never synced: recorded as Pending
    ids = slurm_ids(backend, job.key)
    deadline = time.monotonic() + 60  # they run and end while no server watches them
    while active_in_squeue(ids):
        assert time.monotonic() < deadline, "the trainers' Slurm jobs did not end"
        time.sleep(0.2)
    again = SlurmBackend(backend.settings, time.time, lambda: None)
    again.adopt(job)
    first = again.sync(job.key)
    ended = {w.name: (w.state, w.exit_code) for w in first.workers}
    assert ended == {"trainer-0": (WorkerState.SUCCEEDED, 0), "trainer-1": (WorkerState.SUCCEEDED, 0)}
    assert first.finished and first.failure is None
    backend._jobs.clear()  # the adopter owns it now


def test_resize_adds_a_trainer_with_the_current_endpoints_and_retires_the_highest(
    backend: SlurmBackend, package: Path, tmp_path: Path
) -> None:
    job = launch(package, tmp_path, env={"SLEEP": "300"})
    backend.start(job)
    sync_until(backend, job.key, lambda s: states(s).get("trainer-1") == WorkerState.RUNNING)
    backend.add_trainer(job.key, WorkerPlacement("trainer", 2, "n1"))
    sync_until(backend, job.key, lambda s: states(s).get("trainer-2") == WorkerState.RUNNING)
    deadline = time.monotonic() + 20
    while not (lines := contract_lines(backend, job.key, "trainer-2")):
        assert time.monotonic() < deadline, "trainer-2 printed nothing"
        time.sleep(0.2)
    new = lines[0]
    assert new["SLURMD_NODENAME"] == "n1"
    eps = new["PADDLECLOUD_TRAINER_ENDPOINTS"].split(",")
    assert len(eps) == 3 and new["PADDLECLOUD_CURRENT_ENDPOINT"] == eps[2]
    members = json.loads((backend._job_dir(job.key) / "contract" / "membership.json").read_text())
    assert members["trainers"] == 3
    retired_id = backend._jobs[job.key].workers["trainer-2"].slurm_id
    backend.remove_trainer(job.key, 1)
    st = sync_until(backend, job.key, lambda s: states(s).get("trainer-2") == WorkerState.STOPPED)[-1]
    assert states(st)["trainer-1"] == WorkerState.RUNNING and st.failure is None and not st.finished
    assert retired_id is not None
    deadline = time.monotonic() + 15  # Stopped once its program ended; Slurm's job ends just after
    while active_in_squeue([retired_id]):
        assert time.monotonic() < deadline, "the retired trainer's Slurm job is still there"
        time.sleep(0.2)
    members = json.loads((backend._job_dir(job.key) / "contract" / "membership.json").read_text())
    assert members["trainers"] == 2


def test_requirements_become_an_environment_on_the_shared_dir(backend: SlurmBackend, tmp_path: Path) -> None:
    pkg = tar_package(tmp_path / "envpkg.tar.gz", {"requirements.txt": "six\n", "work.py": ENV_WORK})
    job = launch(pkg, tmp_path, pservers=0)
    backend.start(job)
    seen = sync_until(backend, job.key, lambda s: s.finished, timeout=300)
    assert seen[-1].failure is None, seen[-1].failure
    assert [e.reason for s in seen for e in s.events if e.reason in ("Preparing", "Prepared")] == [
        "Preparing",
        "Prepared",
    ]
    out = b"".join(backend.read_log(LogRequest(job.key, ("trainer-0",)))).decode()
    assert f"prefix {backend.root / 'envs'}" in out and "six ok" in out, out


def test_nodes_count_our_workers_at_the_whole_cpus_slurm_gives_them(
    backend: SlurmBackend, package: Path, tmp_path: Path
) -> None:
    """A 250m worker holds a whole CPU in Slurm, and the controller counts it so (``whole-cpus``):
    nothing of it is foreign (before, the other 750m were, and the plan did not hold them)."""
    assert Capability.WHOLE_CPUS in backend.capabilities
    small = {"trainer": Resources(250, 256 * MI)}
    job = launch(package, tmp_path, pservers=0, nodes=("n2", "n3"), env={"SLEEP": "300"}, resources=small)
    backend.start(job)
    sync_until(backend, job.key, lambda s: set(states(s).values()) == {WorkerState.RUNNING})
    nodes = {n.name: n for n in backend.nodes()}
    assert nodes["n2"].capacity == nodes["n1"].capacity == Resources(4000, 4000 * MI)
    assert nodes["n2"].foreign == Resources() and nodes["n1"].foreign == Resources()


def test_a_planned_rendezvous_store_runs_on_its_node_at_the_master_port(
    backend: SlurmBackend, package: Path, tmp_path: Path
) -> None:
    """An elastic torch job's store the plan placed (``STORE_WORKER``: the controller plans it as
    the job's one pserver, the launch names it ``rendezvous``) is the Slurm job Slurm runs on that
    node, at the job's master port (before: put wherever it fitted, issue 25). Whether the store
    then serves (it needs torch, which this venv lacks) is tests/hosts/test_node_failure.py's."""
    assert Capability.STORE_WORKER in backend.capabilities
    job = store_launch(package, tmp_path)
    backend.start(job)
    record = backend._jobs[job.key]
    store = record.workers["rendezvous-0"]
    sync_until(backend, job.key, lambda s: store.ran_on != "", 90)
    assert store.ran_on == "n3" and store.port == record.stores[1], (store, record.stores)
    assert sorted(record.workers) == ["rendezvous-0", "trainer-0", "trainer-1"]  # one store, planned


def test_a_worker_waits_for_a_node_another_job_holds_and_says_whose(
    backend: SlurmBackend, package: Path, tmp_path: Path
) -> None:
    jid = subprocess.run(
        ["sbatch", "--parsable", "-n1", "-c4", "--mem=1000M", "-w", "n2", "-J", "bigforeign",
         "-o", "/dev/null", f"--chdir={tmp_path}", "--wrap", "sleep 60"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while jid not in {ln.split()[0] for ln in active_in_squeue([int(jid)]) if ln.endswith("RUNNING")}:
            assert time.monotonic() < deadline, "the foreign job does not run"
            time.sleep(0.2)
        job = launch(package, tmp_path, pservers=0, nodes=("n2",))
        backend.start(job)
        why: list[str] = []

        def said_why(st: JobStatus) -> bool:
            why.extend(e.message for e in st.events if e.reason == "Pending" and "trainer-0" in e.message)
            return bool(why)

        seen = sync_until(backend, job.key, said_why, timeout=20)
        # Resources, or Priority (behind another job waiting for the same node)
        assert re.search(r"\(Slurm: (Resources|Priority)\)", why[0]), why
        assert f"job {jid} (bigforeign, 4 CPUs)" in why[0], why
        assert set(states(seen[-1]).values()) == {WorkerState.PENDING}
    finally:
        subprocess.run(["scancel", jid], check=True)
    seen = sync_until(backend, job.key, lambda s: s.finished, timeout=60)
    assert seen[-1].failure is None and set(states(seen[-1]).values()) == {WorkerState.SUCCEEDED}


def test_nodes_see_other_users_load(backend: SlurmBackend, tmp_path: Path) -> None:
    before = {n.name: n.foreign for n in backend.nodes()}
    assert before == {"n1": Resources(), "n2": Resources(), "n3": Resources()}
    jid = subprocess.run(
        ["sbatch", "--parsable", "-n1", "-c3", "--mem=3000M", "-w", "n2", "-J", "foreign", "-o", "/dev/null",
         f"--chdir={tmp_path}", "--wrap", "sleep 60"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while (now := {n.name: n for n in backend.nodes()})["n2"].foreign == before["n2"]:
            assert time.monotonic() < deadline, "the foreign job is not seen"
            time.sleep(0.3)
        assert now["n2"].foreign == Resources(3000, 3000 * MI) and now["n1"].foreign == Resources()
        assert now["n2"].capacity == Resources(4000, 4000 * MI)  # the node's size; the load is foreign
    finally:
        subprocess.run(["scancel", jid], check=True)
