"""The ``paddlecloud`` torchrun rendezvous backend: c10d that an agent's failure leaves open.

Without torch: the handler wraps whatever c10d handler it is given (a fake here); the real one runs in
tests/e2e/test_chaos.py and test_elastic_torch.py.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import types
from pathlib import Path
from typing import Any

import pytest

from paddlecloud.runtime import torchelastic
from paddlecloud.runtime.torchelastic import KeepOpenHandler


class RendezvousClosedError(Exception):
    """Named like torch's: the handler recognises it by name (torch is not imported here)."""


class FakeC10d:
    def __init__(self, closed: bool = False) -> None:
        self.closed = closed
        self.heartbeats = True
        self.use_agent_store = False

    def next_rendezvous(self) -> str:
        if self.closed:
            raise RendezvousClosedError
        return "info"

    def shutdown(self) -> bool:
        self.heartbeats = False
        self.closed = True
        return True

    def _stop_heartbeats(self) -> None:
        self.heartbeats = False

    def get_run_id(self) -> str:
        return "alice-job"

    def num_nodes_waiting(self) -> int:
        return 2

    def is_closed(self) -> bool:
        return self.closed

    def get_backend(self) -> str:
        return "c10d"


def test_an_agent_ending_normally_closes_the_rendezvous() -> None:
    inner = FakeC10d()
    handler = KeepOpenHandler(inner)
    assert handler.next_rendezvous() == "info"
    assert handler.shutdown() is True  # torchrun's finally after agent.run() returned
    assert inner.closed and handler.is_closed()
    assert (handler.get_backend(), handler.get_run_id(), handler.num_nodes_waiting()) == (
        "paddlecloud",
        "alice-job",
        2,
    )
    assert handler.use_agent_store is False


def test_an_agent_failing_leaves_the_rendezvous_open() -> None:
    inner = FakeC10d()
    handler = KeepOpenHandler(inner)
    with pytest.raises(RuntimeError):
        try:
            raise RuntimeError("DistStoreError: wait timeout after 10000ms, keys: .../MASTER_ADDR")
        finally:  # what torchrun's launch_agent does on its way out
            assert handler.shutdown() is False
    assert not inner.closed and not inner.heartbeats  # open for the others; this agent is gone


def test_an_agent_that_finds_the_rendezvous_closed_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    handler = KeepOpenHandler(FakeC10d(closed=True))
    with pytest.raises(SystemExit) as exit_:
        try:
            handler.next_rendezvous()
        finally:
            handler.shutdown()  # a clean exit: closing again is harmless
    assert exit_.value.code == 0
    assert "training has finished" in capsys.readouterr().out


def test_other_rendezvous_errors_pass_through() -> None:
    class Broken(FakeC10d):
        def next_rendezvous(self) -> str:
            raise TimeoutError("join timeout")

    with pytest.raises(TimeoutError):
        KeepOpenHandler(Broken()).next_rendezvous()


def test_torchrun_finds_the_backend_beside_the_runtime(tmp_path: Path) -> None:
    torchelastic.install_entry_point(tmp_path)
    found: list[Any] = [
        ep
        for dist in importlib.metadata.distributions(path=[str(tmp_path)])
        for ep in dist.entry_points
        if ep.group == "torchrun.handlers"
    ]
    assert [(ep.name, ep.value) for ep in found] == [
        ("paddlecloud", "paddlecloud.runtime.torchelastic:handler_creator")
    ]
    assert found[0].load()() is torchelastic.create_handler  # what torch registers


@dataclasses.dataclass(eq=True, order=True, frozen=True)
class FakeNodeDesc:  # torch's _NodeDesc
    addr: str
    pid: int
    local_id: int


class FakeGenerator:
    def generate(self, local_addr: str | None = None) -> FakeNodeDesc:
        return FakeNodeDesc(local_addr or "host", 2, 0)  # pid 2: a launcher's child in its pid namespace


def test_agents_of_one_address_and_pid_are_told_apart_by_their_run_tag(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sandboxed agents share PET_LOCAL_ADDR and (in pid namespaces of their own) their pid: c10d
    took them for one node and every trainer trained alone (tests/e2e/test_elastic_torch.py)."""

    class Handler:
        _node_desc_generator: Any = FakeGenerator()

    dynamic = types.SimpleNamespace(DynamicRendezvousHandler=Handler)
    nodes = []
    for tag in ("0a1b2c3d" + "0" * 24, "ffee0011" + "0" * 24):
        monkeypatch.setenv("PADDLECLOUD_RUN_TAG", tag)
        Handler._node_desc_generator = FakeGenerator()  # a fresh agent process
        torchelastic._tell_agents_apart(dynamic)
        torchelastic._tell_agents_apart(dynamic)  # once per process, however many handlers
        nodes.append(Handler._node_desc_generator.generate("127.0.0.1"))
    assert nodes == [FakeNodeDesc("127.0.0.1", 0x0A1B2C3D, 0), FakeNodeDesc("127.0.0.1", 0xFFEE0011, 0)]
    monkeypatch.delenv("PADDLECLOUD_RUN_TAG")
    Handler._node_desc_generator = FakeGenerator()
    torchelastic._tell_agents_apart(dynamic)  # no tag (not started by the platform): torch's own
    assert Handler._node_desc_generator.generate("a") == FakeNodeDesc("a", 2, 0)
