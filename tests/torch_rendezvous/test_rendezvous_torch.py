"""The ``paddlecloud`` rendezvous backend on torch's own pieces: a real ``TCPStore``, c10d's backend,
torch's state holder and handler, agents in processes of their own.

``make test`` runs them in a venv of their own with torch (``.venv-torch``, made by scripts/test.sh
from the local CPU wheel: the dev venv has no torch); they are skipped where torch cannot be
imported. tests/unit/test_runtime_torchelastic.py checks the same properties without torch.

- A forged state (a pickle whose ``__reduce__`` creates a file, unsigned or with a wrong MAC) written
  into the store by someone outside the job is refused by torch's ``_BackendRendezvousStateHolder``
  (``RendezvousStateError``) and the file is never created.
- The race of the chaos test: rank 0's agent is SIGKILLed after its round completed and before it
  published the workers' master address (``RendezvousStoreInfo.build``); torch's handler fails the
  surviving agent with ``DistStoreError`` (the control case), the platform's joins the next round
  and trains with the killed agent's restart.
"""

from __future__ import annotations

import base64
import datetime
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

from torch.distributed.elastic.rendezvous import RendezvousParameters  # noqa: E402
from torch.distributed.elastic.rendezvous import api as rdzv_api  # noqa: E402
from torch.distributed.elastic.rendezvous import dynamic_rendezvous as dynamic  # noqa: E402
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend  # noqa: E402

from paddlecloud.runtime import torchelastic  # noqa: E402
from paddlecloud.runtime.torchelastic import SignedBackend  # noqa: E402

pytestmark = pytest.mark.timeout(120)

SRC = Path(__file__).resolve().parents[2] / "src"
KEY = "5ec2e7" * 11
RUN = "alice-job"


@pytest.fixture
def store() -> Iterator[Any]:
    """The platform's store (``runtime.rendezvous``): a TCPStore master on a free port."""
    s = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    yield s
    del s


def client(store: Any) -> Any:
    return dist.TCPStore("127.0.0.1", store.port, is_master=False, timeout=datetime.timedelta(seconds=5))


def holder(store: Any, key: str = KEY) -> Any:
    """torch's state holder over the signed c10d backend, as ``create_handler`` builds it."""
    backend = SignedBackend(C10dRendezvousBackend(client(store), RUN), key.encode(), RUN,
                            error=rdzv_api.RendezvousStateError)  # fmt: skip
    settings = dynamic.RendezvousSettings(
        RUN, 1, 2, dynamic.RendezvousTimeout(), datetime.timedelta(seconds=1), 3
    )
    return dynamic._BackendRendezvousStateHolder(backend, settings, cache_duration=0)


def fresh_agent_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch's node descriptors as in a new agent process (``create_handler`` tags them with the
    run's tag, class-wide), restored after the test."""
    fresh = dynamic._NodeDescGenerator()
    monkeypatch.setattr(dynamic.DynamicRendezvousHandler, "_node_desc_generator", fresh)


class Boom:
    def __init__(self, path: Path) -> None:
        self.path = str(path)

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (self.path, "w"))


def test_agents_share_state_through_a_real_store_and_a_fresh_one_is_empty(store: Any) -> None:
    one, two = holder(store), holder(store)
    one.sync()
    assert one.state.round == 0 and not one.state.participants  # c10d's sentinel: a fresh state
    one.state.round = 3
    one.mark_dirty()
    assert one.sync() is True
    two.sync()
    assert two.state.round == 3
    raw = base64.b64decode(store.get(f"torch.rendezvous.{RUN}"))
    assert raw.startswith(b"paddlecloud-rdzv-1:")


@pytest.mark.parametrize("mac", [None, b"\0" * 32], ids=["unsigned", "wrong-mac"])
def test_a_forged_state_in_the_store_is_refused_and_never_unpickled(
    store: Any, tmp_path: Path, mac: bytes | None
) -> None:
    agent = holder(store)
    agent.sync()
    proof = tmp_path / "pwned"
    payload = pickle.dumps(Boom(proof))
    forged = payload if mac is None else b"paddlecloud-rdzv-1:" + mac + payload
    client(store).set(f"torch.rendezvous.{RUN}", base64.b64encode(forged))  # a stranger's write
    with pytest.raises(rdzv_api.RendezvousStateError, match="refused, not unpickled"):
        agent.sync()
    agent.mark_dirty()  # a write: compare_set answers with the forged state, refused too
    with pytest.raises(rdzv_api.RendezvousStateError):
        agent.sync()
    assert not proof.exists()
    pickle.loads(payload)  # and the payload was live: unpickled, it creates the file
    assert proof.exists()


def test_the_handler_refuses_another_jobs_state_and_runs_only_with_a_key(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    holder(store, key="another job's key, long enough to pass").sync()
    other = holder(store, key="another job's key, long enough to pass")
    other.state.round = 1
    other.mark_dirty()
    other.sync()  # the store now holds a state signed with another key
    fresh_agent_process(monkeypatch)
    params = RendezvousParameters(
        backend="paddlecloud", endpoint=f"127.0.0.1:{store.port}", run_id=RUN, min_nodes=1, max_nodes=2,
        is_host="false", read_timeout="5",
    )  # fmt: skip
    monkeypatch.delenv("PADDLECLOUD_RDZV_KEY", raising=False)
    with pytest.raises(torchelastic.RendezvousKeyError):
        torchelastic.create_handler(params)
    monkeypatch.setenv("PADDLECLOUD_RDZV_KEY", KEY)
    handler = torchelastic.create_handler(params)
    with pytest.raises(rdzv_api.RendezvousStateError, match="does not match the job's key"):
        handler.num_nodes_waiting()  # what torchrun's agent asks every monitor interval


# -- rank 0 killed right after its round completed -------------------------------------------

#: an agent: joins the rendezvous at argv[1]; with argv[2] == "stall" it stops before it publishes
#: the master address (as if killed right there), else it prints its rank and world and exits
AGENT = textwrap.dedent(
    """
    import sys, time
    from torch.distributed.elastic.rendezvous import RendezvousParameters, dynamic_rendezvous
    from paddlecloud.runtime import torchelastic

    if sys.argv[2] == "stall":
        class Stalled:
            @staticmethod
            def build(rank, store, local_addr=None, server_port=None):
                print(f"joined as rank {rank}", flush=True)
                time.sleep(600)
        dynamic_rendezvous.RendezvousStoreInfo = Stalled
    params = RendezvousParameters(**eval(sys.argv[3]))
    info = torchelastic.create_handler(params).next_rendezvous()
    print(f"rank {info.rank} world {info.world_size}", flush=True)
    """
)


def params_of(store: Any) -> dict[str, Any]:
    return dict(
        backend="paddlecloud", endpoint=f"127.0.0.1:{store.port}", run_id=RUN, min_nodes=2, max_nodes=2,
        is_host="false", read_timeout="2", keep_alive_interval="1", keep_alive_max_attempt="3",
        last_call_timeout="1", join_timeout="60",
    )  # fmt: skip


def agent(store: Any, tag: str, mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "PADDLECLOUD_RDZV_KEY": KEY, "PADDLECLOUD_RUN_TAG": tag,
           "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}  # fmt: skip
    argv = [sys.executable, "-c", AGENT, "x", mode, repr(params_of(store))]
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def first_line(proc: subprocess.Popen[str], prefix: str, timeout: float = 60) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            return line.strip()
        assert line or proc.poll() is None, f"agent ended ({proc.returncode}) before {prefix!r}"
    raise AssertionError(f"no {prefix!r} within {timeout} s")


@pytest.mark.parametrize("platform", [True, False], ids=["paddlecloud", "torch-c10d-control"])
def test_a_survivor_of_a_rank_0_killed_after_the_round_joins_the_next_round(
    store: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], platform: bool
) -> None:
    fresh_agent_process(monkeypatch)
    monkeypatch.setenv("PADDLECLOUD_RDZV_KEY", KEY)
    monkeypatch.setenv("PADDLECLOUD_RUN_TAG", "ffffffff" + "0" * 24)  # the survivor sorts last: rank 1
    monkeypatch.setenv("TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "1")
    survivor = torchelastic.create_handler(RendezvousParameters(**params_of(store)))
    result: dict[str, Any] = {}

    def join() -> None:
        try:
            result["info"] = survivor.next_rendezvous() if platform else survivor._inner.next_rendezvous()
        except Exception as exc:  # what the agent would die of
            result["error"] = exc

    thread = threading.Thread(target=join, daemon=True)
    rank0 = agent(store, "00000001" + "0" * 24, "stall")
    restarted: subprocess.Popen[str] | None = None
    try:
        thread.start()
        assert first_line(rank0, "joined as rank") == "joined as rank 0"  # the round is complete
        rank0.send_signal(signal.SIGKILL)  # before it published MASTER_ADDR
        rank0.wait()
        restarted = agent(store, "00000002" + "0" * 24, "run")  # the platform restarts it (OnFailure)
        thread.join(60)
        assert not thread.is_alive(), "the survivor is stuck in the rendezvous"
        if not platform:  # torch's handler: the survivor's agent dies of it (a failed trainer)
            assert type(result.get("error")).__name__ == "DistStoreError", result
            return
        assert "error" not in result, result
        info = result["info"]
        assert (info.rank, info.world_size) == (1, 2)  # a new round, with the restarted agent as rank 0
        assert first_line(restarted, "rank ") == "rank 0 world 2"
        assert restarted.wait(30) == 0
        assert "joining the next round (attempt 2 of 5)" in capsys.readouterr().err
    finally:
        for p in (rank0, restarted):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
