"""The ``paddlecloud`` torchrun rendezvous backend: c10d that an agent's failure leaves open, whose
state is signed with the job's key, and whose bootstrap is retried when a peer vanished.

Without torch: the handler wraps whatever c10d handler it is given (a fake here), the signed backend
a fake of c10d's over a fake store (``get`` / ``compare_set``, c10d's base64 and sentinel). With torch
importable (a job environment, or a dev venv with the local wheel) the same properties are checked
on torch's own pieces in tests/unit/tests/torch_rendezvous/test_rendezvous_torch.py; the whole thing runs in
tests/e2e/test_chaos.py and test_elastic_torch.py.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import importlib.metadata
import os
import pickle
import types
from pathlib import Path
from typing import Any

import pytest

from paddlecloud.runtime import torchelastic
from paddlecloud.runtime.torchelastic import KeepOpenHandler, RendezvousKeyError, SignedBackend


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


# -- the bootstrap after a completed round, retried when a peer vanished -------------------------


class DistStoreError(RuntimeError):
    """Named like torch's (a subclass of RuntimeError there too): a store read that timed out."""


class PeerGone(FakeC10d):
    """Rank 0 was killed after the round completed: the first ``failures`` bootstraps time out."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures, self.calls = failures, 0

    def next_rendezvous(self) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise DistStoreError("wait timeout after 10000ms, keys: /torch.rendezvous.job.3/MASTER_ADDR")
        return f"info of round {self.calls}"


def test_a_bootstrap_that_lost_its_rank_0_joins_the_next_round(capsys: pytest.CaptureFixture[str]) -> None:
    inner = PeerGone(failures=2)
    assert KeepOpenHandler(inner).next_rendezvous() == "info of round 3"
    assert inner.calls == 3
    err = capsys.readouterr().err
    assert err.count("joining the next round") == 2 and "MASTER_ADDR" in err, err
    assert "attempt 3 of 5" in err


def test_the_retries_are_bounded() -> None:
    inner = PeerGone(failures=torchelastic.BOOTSTRAP_ATTEMPTS)
    with pytest.raises(DistStoreError):
        KeepOpenHandler(inner).next_rendezvous()
    assert inner.calls == torchelastic.BOOTSTRAP_ATTEMPTS


def test_a_subclass_of_the_store_error_is_retried_and_a_closed_rendezvous_still_exits_0() -> None:
    class Timeout(DistStoreError):
        pass

    class ThenClosed(FakeC10d):
        calls = 0

        def next_rendezvous(self) -> str:
            self.calls += 1
            if self.calls == 1:
                raise Timeout("wait timeout")
            raise RendezvousClosedError

    with pytest.raises(SystemExit) as exit_:
        KeepOpenHandler(ThenClosed()).next_rendezvous()
    assert exit_.value.code == 0


# -- the signed rendezvous state -----------------------------------------------------------------

KEY = b"0123456789abcdef" * 4
RUN = "alice-job"
WHERE = f"torch.rendezvous.{RUN}"


class FakeStore:
    """The two calls c10d's backend makes of a ``TCPStore``."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def get(self, key: str) -> bytes:
        return self.data[key]

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        current = self.data.get(key, b"")
        if current == expected.encode():
            self.data[key] = desired.encode()
        return self.data[key] if key in self.data else expected.encode()


class FakeC10dBackend:
    """What torch's ``C10dRendezvousBackend`` does with the store (base64, the sentinel, the token
    being the stored value itself), as of torch 2.13."""

    SENTINEL = "Y2FuaW1hZGFt"
    name = "c10d"

    def __init__(self, store: FakeStore, run_id: str) -> None:
        self.store, self.key = store, f"torch.rendezvous.{run_id}"
        store.compare_set(self.key, "", self.SENTINEL)

    def get_state(self) -> tuple[bytes, bytes] | None:
        return self._decode(self.store.get(self.key))

    def set_state(self, state: bytes, token: object = None) -> tuple[bytes, bytes, bool] | None:
        expected = token.decode() if isinstance(token, bytes) else self.SENTINEL
        got = self._decode(self.store.compare_set(self.key, expected, base64.b64encode(state).decode()))
        return None if got is None else (*got, got[0] == state)

    def _decode(self, raw: bytes) -> tuple[bytes, bytes] | None:
        return None if raw == self.SENTINEL.encode() else (base64.b64decode(raw), raw)


class Boom:
    """A pickle that creates a file when it is unpickled: what a hostile user wrote to the store."""

    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


class Refused(Exception):
    """Stands for torch's RendezvousStateError."""


def signed(store: FakeStore, key: bytes = KEY, run: str = RUN) -> SignedBackend:
    return SignedBackend(FakeC10dBackend(store, run), key, run, error=Refused)


def sync(backend: SignedBackend) -> object:
    """What torch's state holder does with what the backend returns (``pickle.loads``)."""
    got = backend.get_state()
    return None if got is None else pickle.loads(got[0])


def test_agents_of_the_job_share_signed_state_and_the_empty_state_is_still_none() -> None:
    store = FakeStore()
    one, two = signed(store), signed(store)
    assert one.get_state() is None  # c10d's sentinel: no state yet
    state = pickle.dumps({"round": 1, "participants": ["a", "b"]})
    written = one.set_state(state)  # first write: over the sentinel
    assert written is not None and written[0] == state and written[2] is True
    raw = base64.b64decode(store.data[WHERE])
    assert raw.startswith(b"paddlecloud-rdzv-1:") and raw.endswith(state)  # signed, not encrypted
    got = two.get_state()
    assert got is not None and pickle.loads(got[0]) == {"round": 1, "participants": ["a", "b"]}
    newer = pickle.dumps({"round": 2})
    assert two.set_state(newer, got[1]) == (newer, base64.b64encode(two.seal(newer)), True)
    stale = one.set_state(pickle.dumps({"round": 9}), written[1])  # one's token is old: not written
    assert stale is not None and stale[0] == newer and stale[2] is False
    assert one.name == "c10d"


@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda p: p, id="unsigned"),
        pytest.param(lambda p: b"paddlecloud-rdzv-1:" + b"\0" * 32 + p, id="wrong-mac"),
        pytest.param(lambda p: b"paddlecloud-rdzv-1:" + b"\0" * 7, id="truncated"),
        pytest.param(
            lambda p: SignedBackend(None, b"another job's key" * 2, RUN).seal(p), id="another-jobs-key"
        ),
        pytest.param(lambda p: SignedBackend(None, KEY, "alice-other").seal(p), id="another-run"),
    ],
)
def test_forged_state_is_refused_and_never_unpickled(forge: Any, tmp_path: Path) -> None:
    store = FakeStore()
    backend = signed(store)
    backend.set_state(pickle.dumps({"round": 1}))
    proof = tmp_path / "pwned"
    payload = pickle.dumps(Boom(proof))
    pickle.loads(payload)  # the payload works: unpickled, it creates the file
    assert proof.exists()
    proof.unlink()
    store.data[WHERE] = base64.b64encode(forge(payload))  # anyone who reaches the store can do this
    with pytest.raises(Refused, match=r"torch.rendezvous.alice-job .*refused, not unpickled"):
        sync(backend)
    # set_state answers with what is in the store when the write loses the race: refused too
    with pytest.raises(Refused):
        backend.set_state(pickle.dumps({"round": 2}), b"a token from before the forgery")
    assert not proof.exists()


def test_a_forged_sentinel_only_empties_the_state() -> None:
    """c10d's sentinel is unsigned (it is torch's, below the signature): writing it resets the
    rendezvous, which anyone who reaches the store can do anyway (delete the key); no code runs."""
    store = FakeStore()
    backend = signed(store)
    backend.set_state(pickle.dumps({"round": 1}))
    store.data[WHERE] = FakeC10dBackend.SENTINEL.encode()
    assert backend.get_state() is None


def test_the_signature_is_hmac_sha256_of_the_store_key_and_state() -> None:
    state = b"state"
    mac = hmac.new(KEY, WHERE.encode() + b"\0" + state, hashlib.sha256).digest()
    assert SignedBackend(None, KEY, RUN).seal(state) == b"paddlecloud-rdzv-1:" + mac + state


def test_the_job_key_comes_from_the_env_contract_and_is_required() -> None:
    assert torchelastic.job_key({"PADDLECLOUD_RDZV_KEY": "ab" * 32}) == b"ab" * 32
    with pytest.raises(RendezvousKeyError, match="PADDLECLOUD_RDZV_KEY is not set: refusing to run"):
        torchelastic.job_key({})
    with pytest.raises(RendezvousKeyError, match="has 6 characters"):
        torchelastic.job_key({"PADDLECLOUD_RDZV_KEY": "secret"})


def test_create_handler_refuses_before_torch_is_touched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PADDLECLOUD_RDZV_KEY", raising=False)
    with pytest.raises(RendezvousKeyError):
        torchelastic.create_handler(object())  # no params are read, no store is connected
    assert "PADDLECLOUD_RDZV_KEY" not in os.environ
