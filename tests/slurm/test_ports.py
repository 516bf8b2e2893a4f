"""A server's port held on its node by a process outside the platform (issue 25): the server chose
the port and could see only its own host, so the node's launcher finds it held, says ``PortHeld``,
and the backend moves that server to another port on the same node before any trainer starts; the
trainers get the new endpoint and the job succeeds without a restart counted. Against the real
private Slurm cluster, whose emulated nodes share this host: the backend's own check of its host is
turned off, as if the node were another machine."""

from __future__ import annotations

import dataclasses
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from paddlecloud.backends.base import LogRequest
from paddlecloud.backends.slurm import SlurmBackend, SlurmSettings
from paddlecloud.backends.slurm import ports as slurm_ports
from paddlecloud.core.phases import WorkerReason, WorkerState
from tests.e2e.juicefs_fixtures import tar_package
from tests.slurm.test_backend import WORK, contract_lines, launch, states, store_launch, sync_until

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tar_package(tmp_path_factory.mktemp("pkg") / "package.tar.gz", {"work.py": WORK})


def _range_holding(offset: int, width: int = 16) -> tuple[socket.socket, tuple[int, int]]:
    """``width`` free ports (a bounded search in 29000-32999) and a listener on the one at
    ``offset`` in them, as another program on the node would hold it."""
    for lo in range(29000, 33000, width):
        if not all(slurm_ports.bindable(p) for p in range(lo, lo + width)):
            continue
        held = socket.socket()
        held.bind(("0.0.0.0", lo + offset))
        held.listen()
        return held, (lo, lo + width - 1)
    raise AssertionError("no free port range in 29000-32999")


@pytest.fixture
def bare(slurm: dict[str, str], tmp_path: Path) -> Iterator[SlurmBackend]:
    """A backend without sandboxes (``--isolation none``): workers share the node's network."""
    settings = SlurmSettings(root=tmp_path / "slurm", cleanup_grace=1, isolation="none")
    b = SlurmBackend(settings, time.time, lambda: None)
    yield b
    for key in list(b._jobs):
        b.stop(key, 0)
    b.close()


def _as_if_on_another_host(
    backend: SlurmBackend, ports: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backend's check of its own host sees nothing (the node is another machine), and its
    range is ``ports``."""
    monkeypatch.setattr(slurm_ports, "bindable", lambda port: True)
    backend.settings = dataclasses.replace(backend.settings, ports=ports)


def test_a_pserver_whose_port_a_node_process_holds_moves_to_another_port(
    bare: SlurmBackend, package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    squatter, ports = _range_holding(0)
    with squatter:
        _as_if_on_another_host(bare, ports, monkeypatch)
        job = launch(package, tmp_path, env={"SLEEP": "1"})
        bare.start(job)
        assert bare._jobs[job.key].workers["pserver-0"].port == ports[0]  # the squatter's
        seen = sync_until(bare, job.key, lambda s: s.finished, timeout=120)
    last = seen[-1]
    assert last.failure is None, last.failure
    assert states(last)["trainer-0"] == states(last)["trainer-1"] == WorkerState.SUCCEEDED, states(last)
    events = [e for st in seen for e in st.events]  # each sync hands over the events since the last
    moved = [e for e in events if e.reason == "PortMoved"]
    assert len(moved) == 1 and f"port {ports[0]} is held on n1" in moved[0].message, events
    assert not [e for e in events if e.reason == "WorkerRestarting"], events
    first = b"".join(bare.read_log(LogRequest(job.key, ("pserver-0",), previous=True))).decode()
    assert f"port {ports[0]} on" in first and "cannot be bound" in first, first
    ps = contract_lines(bare, job.key, "pserver-0")[0]
    host, _, port = ps["PADDLECLOUD_CURRENT_ENDPOINT"].rpartition(":")
    assert int(port) != ports[0] and ps["SLURMD_NODENAME"] == "n1", ps  # same node, another port
    for i in range(2):
        trainer = contract_lines(bare, job.key, f"trainer-{i}")[0]
        assert trainer["PADDLECLOUD_PSERVER_ENDPOINTS"] == f"{host}:{port}", trainer
    record = bare._jobs[job.key]
    assert record.job_restarts == 0 and record.workers["pserver-0"].run == 1


def test_the_store_whose_port_is_held_moves_with_the_master_port(
    bare: SlurmBackend, package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The elastic torch job's rendezvous store listens on the job's master port (the last of its
    ports: 3 workers + 2 stores here): moving it moves the master port the trainers get."""
    squatter, ports = _range_holding(4)
    with squatter:
        _as_if_on_another_host(bare, ports, monkeypatch)
        job = store_launch(package, tmp_path)
        bare.start(job)
        record = bare._jobs[job.key]
        store = record.workers["rendezvous-0"]
        assert store.port == record.stores[1] == ports[0] + 4, (store, record.stores)
        # its second run got past the launcher's check (the store itself needs torch, which this
        # venv lacks: whether it serves is tests/hosts/test_node_failure.py's)
        seen = sync_until(bare, job.key, lambda s: store.run == 1 and store.state != WorkerState.PENDING, 90)
    assert store.port != ports[0] + 4 and record.stores[1] == store.port, (store, record.stores)
    assert store.ran_on == "n3" and store.why != WorkerReason.PORT_HELD, store
    events = [e.reason for st in seen for e in st.events]
    assert events.count("PortMoved") == 1, events


def test_sandboxed_a_process_on_the_node_holding_the_port_is_not_in_the_way(
    backend: SlurmBackend, package: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sandboxed (the default where bubblewrap works), each job has a network namespace of its own
    on each host: the pserver binds the port the squatter holds in the node's, unmoved."""
    squatter, ports = _range_holding(0)
    with squatter:
        _as_if_on_another_host(backend, ports, monkeypatch)
        job = launch(package, tmp_path, env={"SLEEP": "1"})
        backend.start(job)
        seen = sync_until(backend, job.key, lambda s: s.finished, timeout=120)
    assert seen[-1].failure is None, seen[-1].failure
    assert not [e for st in seen for e in st.events if e.reason == "PortMoved"]
    ps = contract_lines(backend, job.key, "pserver-0")[0]
    assert ps["PADDLECLOUD_CURRENT_ENDPOINT"].endswith(f":{ports[0]}"), ps
