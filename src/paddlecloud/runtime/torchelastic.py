"""The rendezvous of elastic PyTorch jobs: torch's c10d rendezvous, kept open when an agent fails.

torchrun shuts the rendezvous down (marks it closed, for good) whenever its agent ends other than by
a signal: after success, but also when the agent itself failed, for instance with ``DistStoreError``
while waiting for the workers' master address from a rank 0 that was killed just after a round
completed. A closed rendezvous admits nobody: every other agent fails at its next round with
``RendezvousClosedError``, and so does every agent the platform restarts, until the job's restart
limit fails the job (a known torchrun problem, pytorch/pytorch#67616; NVIDIA's resiliency launcher
and DLRover keep the rendezvous open as well). On PaddleCloud the rendezvous belongs to the job: the
platform hosts its store (``runtime.rendezvous``) and ends it with the job. So elastic torch jobs
use this handler, torchrun's rendezvous backend ``paddlecloud`` (``PET_RDZV_BACKEND``), which is
c10d with two changes:

- ``shutdown()`` closes the rendezvous only when the agent ends normally (its workers finished);
  an agent that fails leaves it open for the others and for its own restart;
- an agent that finds the rendezvous closed (the training finished while it was being restarted)
  exits 0 instead of failing;
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
import importlib
import os
import sys
from pathlib import Path
from typing import Any

__all__ = [
    "BACKEND", "KeepOpenHandler", "create_handler", "entry_point_files", "handler_creator",
    "install_entry_point",
]  # fmt: skip

#: the name torchrun knows the handler by (``--rdzv-backend`` / ``PET_RDZV_BACKEND``)
BACKEND = "paddlecloud"
#: the variable the local backend sets to a random value per run of a worker (``process.RUN_TAG``)
RUN_TAG_VAR = "PADDLECLOUD_RUN_TAG"
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
    """A c10d rendezvous handler for ``params`` (torch's ``RendezvousParameters``), kept open."""
    c10d = importlib.import_module("torch.distributed.elastic.rendezvous.c10d_rendezvous_backend")
    dynamic = importlib.import_module("torch.distributed.elastic.rendezvous.dynamic_rendezvous")
    backend, store = c10d.create_backend(params)
    _tell_agents_apart(dynamic)
    return KeepOpenHandler(dynamic.create_handler(store, backend, params))


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
        try:
            return self._inner.next_rendezvous()
        except Exception as exc:
            if type(exc).__name__ != "RendezvousClosedError":
                raise
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
