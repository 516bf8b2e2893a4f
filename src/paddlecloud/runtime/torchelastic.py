"""The rendezvous of elastic PyTorch jobs: torch's c10d rendezvous, kept open, signed, and re-run when
a peer vanishes right after a round.

    torchrun agent ──next_rendezvous()──▶ KeepOpenHandler ──▶ torch's DynamicRendezvousHandler
        └ its state holder: pickle.dumps(state) ──▶ SignedBackend.set_state: MAGIC | HMAC | state
                            pickle.loads(state) ◀── SignedBackend.get_state: verified, else refused
        SignedBackend ──▶ c10d's backend ──base64──▶ key torch.rendezvous.<run id> of the job's
        TCPStore (the platform's ``runtime.rendezvous`` process, on the job's master endpoint)

torchrun shuts the rendezvous down (marks it closed, for good) whenever its agent ends other than by
a signal: after success, but also when the agent itself failed. A closed rendezvous admits nobody:
every other agent fails at its next round with ``RendezvousClosedError``, and so does every agent
the platform restarts, until the job's restart limit fails the job (a known torchrun problem,
pytorch/pytorch#67616; NVIDIA's resiliency launcher and DLRover keep the rendezvous open as well).
On PaddleCloud the rendezvous belongs to the job: the platform hosts its store and ends it with the
job. So elastic torch jobs use this handler, torchrun's rendezvous backend ``paddlecloud``
(``PET_RDZV_BACKEND``), which is c10d with these changes:

- ``shutdown()`` closes the rendezvous only when the agent ends normally (its workers finished);
  an agent that fails leaves it open for the others and for its own restart;
- an agent that finds the rendezvous closed (the training finished while it was being restarted)
  exits 0 instead of failing;
- **the state is signed.** torch keeps the rendezvous state as a pickle in the store and unpickles
  whatever it reads there (``_BackendRendezvousStateHolder.sync``), and the store has no
  authentication: whoever reaches its port could run code in every agent. Every state written is
  prefixed with an HMAC-SHA256 under the job's key (``PADDLECLOUD_RDZV_KEY``, random per job, given
  by the backend to every trainer of the job and to no one else) and every state read is verified
  before torch sees it; one that fails is refused with ``RendezvousStateError``, never unpickled.
  c10d's empty-state sentinel is c10d's own business below the signature (it reads as no state).
  Without a key the handler refuses to run at all;
- **a bootstrap that fails because a peer vanished is retried.** After a round completes, rank 0's
  agent publishes the workers' master address in the store and the others wait for it
  (``RendezvousStoreInfo.build``, ``read_timeout``). A rank 0 killed in between leaves them with
  ``DistStoreError``; torch lets it end the agent, which the platform counts as a failed trainer
  (its restart limit). Here the agent runs the rendezvous again instead, at most
  ``BOOTSTRAP_ATTEMPTS`` times: it leaves the round, the dead agent's heartbeats expire, and the
  next round forms with whoever is alive (the killed trainer's restart included);
- an agent is known to the rendezvous by its address and its run's tag (``PADDLECLOUD_RUN_TAG``)
  instead of its pid: in the local backend's sandboxes every agent is the same pid of a pid namespace
  of its own, and with the same address (``PET_LOCAL_ADDR``) c10d took them all for one node (each
  trained alone in a world of 1).

torchrun finds the backend through the ``torchrun.handlers`` entry point that ``install_entry_point``
writes beside the copy of this package that workers import. Standard library only: torch is
imported when a handler is created, inside the job's environment.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import importlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from paddlecloud.runtime import contract as c

__all__ = [
    "BACKEND",
    "BOOTSTRAP_ATTEMPTS",
    "KeepOpenHandler",
    "RendezvousKeyError",
    "SignedBackend",
    "create_handler",
    "entry_point_files",
    "handler_creator",
    "install_entry_point",
    "job_key",
]

#: the name torchrun knows the handler by (``--rdzv-backend`` / ``PET_RDZV_BACKEND``)
BACKEND = "paddlecloud"
#: the variable the local backend sets to a random value per run of a worker (``process.RUN_TAG``)
RUN_TAG_VAR = "PADDLECLOUD_RUN_TAG"
#: how many times ``next_rendezvous`` runs when the bootstrap after a completed round fails because
#: a peer vanished (each attempt waits at most ``read_timeout`` for it, then a new round forms)
BOOTSTRAP_ATTEMPTS = 5
#: what torch raises from the bootstrap when a peer never wrote what it waits for (a store read that
#: timed out); in the join itself c10d turns every store error into ``RendezvousConnectionError``
_PEER_GONE = ("DistStoreError",)
#: the shortest key accepted (the platform's are 64 hex digits: ``core.envcontract``)
MIN_KEY_CHARS = 32
#: a signed state: MAGIC, HMAC-SHA256(key, store key NUL state), then the pickled state itself
_MAGIC = b"paddlecloud-rdzv-1:"
_MAC_BYTES = hashlib.sha256().digest_size
_DIST_INFO = "paddlecloud_runtime-1.0.dist-info"


def entry_point_files() -> dict[str, str]:
    """What registers the handler for torchrun: a distribution's metadata with the entry point, as
    paths relative to the directory on ``PYTHONPATH`` that holds the workers' copy of
    ``paddlecloud.runtime``, and their text."""
    return {
        f"{_DIST_INFO}/METADATA": "Metadata-Version: 2.1\nName: paddlecloud-runtime\nVersion: 1.0\n",
        f"{_DIST_INFO}/entry_points.txt": (
            f"[torchrun.handlers]\n{BACKEND} = paddlecloud.runtime.torchelastic:handler_creator\n"
        ),
    }


def install_entry_point(lib: Path) -> None:
    """Register the handler for torchrun in ``lib``, the directory on ``PYTHONPATH`` that holds the
    workers' copy of ``paddlecloud.runtime`` (:func:`entry_point_files`)."""
    for name, text in entry_point_files().items():
        (lib / name).parent.mkdir(parents=True, exist_ok=True)
        (lib / name).write_text(text)


def handler_creator() -> Any:
    """The ``torchrun.handlers`` entry point: torch registers what this returns as the creator."""
    return create_handler


def create_handler(params: Any) -> KeepOpenHandler:
    """A c10d rendezvous handler for ``params`` (torch's ``RendezvousParameters``): kept open, its
    state signed with the job's key (:func:`job_key`; refused without one)."""
    key = job_key(os.environ)
    api = importlib.import_module("torch.distributed.elastic.rendezvous.api")
    c10d = importlib.import_module("torch.distributed.elastic.rendezvous.c10d_rendezvous_backend")
    dynamic = importlib.import_module("torch.distributed.elastic.rendezvous.dynamic_rendezvous")
    backend, store = c10d.create_backend(params)
    signed = SignedBackend(backend, key, params.run_id, error=api.RendezvousStateError)
    _tell_agents_apart(dynamic)
    return KeepOpenHandler(dynamic.create_handler(store, signed, params))


class RendezvousKeyError(RuntimeError):
    """The job's rendezvous key is missing or too short: the handler will not run unsigned."""


def job_key(environ: Mapping[str, str]) -> bytes:
    """The job's rendezvous key from ``PADDLECLOUD_RDZV_KEY``. Missing (torchrun started by hand
    with this backend, or an agent of a job started before the platform set it), the handler refuses
    to run rather than accept whatever state the store holds."""
    key = environ.get(c.RDZV_KEY, "")
    if len(key) < MIN_KEY_CHARS:
        why = "is not set" if not key else f"has {len(key)} characters, fewer than {MIN_KEY_CHARS}"
        raise RendezvousKeyError(
            f"the {BACKEND} rendezvous signs its state with the job's key, but {c.RDZV_KEY} {why}: "
            "refusing to run with unsigned rendezvous state (the platform sets it for elastic torch "
            "jobs; started by hand, use torchrun's own c10d backend)"
        )
    return key.encode()


class SignedBackend:
    """torch's ``RendezvousBackend`` over c10d's: every state written is signed with the job's key and
    every state read (``get_state``, and the state ``set_state`` answers with, ours or another
    agent's) is verified before it is returned to torch, which unpickles it. A state that fails is
    refused with ``error`` (torch's ``RendezvousStateError`` in agents) and never returned."""

    def __init__(self, inner: Any, key: bytes, run_id: str, error: type[Exception] = ValueError) -> None:
        self._inner, self._error = inner, error
        self._key = key
        #: what the signature also covers: the store key (a state of one run is no state of another)
        self._where = f"torch.rendezvous.{run_id}"

    @property
    def name(self) -> str:
        return str(self._inner.name)

    def get_state(self) -> tuple[bytes, Any] | None:
        got = self._inner.get_state()
        if got is None:  # c10d's sentinel: no state yet
            return None
        sealed, token = got
        return self.open(sealed), token

    def set_state(self, state: bytes, token: Any = None) -> tuple[bytes, Any, bool] | None:
        got = self._inner.set_state(self.seal(state), token)
        if got is None:
            return None
        sealed, new_token, written = got
        return self.open(sealed), new_token, bool(written)

    def seal(self, state: bytes) -> bytes:
        return _MAGIC + self._mac(state) + state

    def open(self, sealed: bytes) -> bytes:
        """The state inside ``sealed``, verified; ``error`` when it is not signed with the job's key."""
        head = len(_MAGIC) + _MAC_BYTES
        if not sealed.startswith(_MAGIC) or len(sealed) < head:
            raise self._error(self._refusal("is not signed"))
        state = sealed[head:]
        if not hmac.compare_digest(sealed[len(_MAGIC) : head], self._mac(state)):
            raise self._error(self._refusal("has a signature that does not match the job's key"))
        return state

    def _mac(self, state: bytes) -> bytes:
        return hmac.new(self._key, self._where.encode() + b"\0" + state, hashlib.sha256).digest()

    def _refusal(self, why: str) -> str:
        return (
            f"the rendezvous state in {self._where} {why}: refused, not unpickled (someone other "
            f"than this job's agents wrote it to the store, or an agent without the job's "
            f"{c.RDZV_KEY})"
        )


class _TaggedNodes:
    """torch's node descriptor generator with the run's tag in place of the process id."""

    def __init__(self, inner: Any, tag: int) -> None:
        self.inner, self.tag = inner, tag

    def generate(self, local_addr: str | None = None) -> Any:
        return dataclasses.replace(self.inner.generate(local_addr), pid=self.tag)


def _tell_agents_apart(dynamic: Any) -> None:
    tag = os.environ.get(RUN_TAG_VAR, "")
    handler = dynamic.DynamicRendezvousHandler
    if len(tag) >= 8 and not isinstance(handler._node_desc_generator, _TaggedNodes):
        handler._node_desc_generator = _TaggedNodes(handler._node_desc_generator, int(tag[:8], 16))


def _named(exc: BaseException, *names: str) -> bool:
    """Whether ``exc`` is one of torch's exceptions ``names`` (or a subclass): torch is not imported
    here."""
    return any(t.__name__ in names for t in type(exc).__mro__)


def _ends_normally(exc: BaseException | None) -> bool:
    return exc is None or (isinstance(exc, SystemExit) and exc.code in (0, None))


class KeepOpenHandler:
    """torch's ``RendezvousHandler`` interface around a c10d handler (see the module's doc)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def get_backend(self) -> str:
        return BACKEND

    @property
    def use_agent_store(self) -> bool:
        return bool(self._inner.use_agent_store)

    def next_rendezvous(self) -> Any:
        """torch's, run again (at most ``BOOTSTRAP_ATTEMPTS`` times in all) when the bootstrap after
        a completed round fails because a peer vanished; exit 0 when the rendezvous is closed."""
        for attempt in range(1, BOOTSTRAP_ATTEMPTS + 1):
            try:
                return self._inner.next_rendezvous()
            except Exception as exc:
                if _named(exc, "RendezvousClosedError"):
                    break
                if not _named(exc, *_PEER_GONE) or attempt == BOOTSTRAP_ATTEMPTS:
                    raise
                print(
                    f"rendezvous {self.get_run_id()}: the round this agent joined could not start "
                    f"({type(exc).__name__}: {exc}), a peer left it; joining the next round "
                    f"(attempt {attempt + 1} of {BOOTSTRAP_ATTEMPTS})",
                    file=sys.stderr,
                    flush=True,
                )
        # Only agents that ended normally close it: the job's training is over.
        print(f"the rendezvous of {self.get_run_id()} is closed: training has finished", flush=True)
        raise SystemExit(0)

    def shutdown(self) -> bool:
        """Close the rendezvous when the agent ends normally; when it fails (torchrun calls this
        while the exception is on its way out), only stop this agent's heartbeats."""
        if _ends_normally(sys.exc_info()[1]):
            return bool(self._inner.shutdown())
        stop = getattr(self._inner, "_stop_heartbeats", None)
        if callable(stop):
            stop()
        return False

    def is_closed(self) -> bool:
        return bool(self._inner.is_closed())

    def set_closed(self) -> None:
        self._inner.set_closed()

    def num_nodes_waiting(self) -> int:
        return int(self._inner.num_nodes_waiting())

    def get_run_id(self) -> str:
        return str(self._inner.get_run_id())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
