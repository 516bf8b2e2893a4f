"""The start sequence every backend follows, as a pure function of its workers' states.

    Preparing ──prepared──▶ start the servers (pservers, an elastic torch job's rendezvous store),
                            or the trainers when the job has none
    PServers  ──every server runs and listens──▶ start the trainers
    Trainers  ──every trainer succeeded──▶ stop the servers (Stopping; then Done, once the
                                           backend saw every worker end)

``next_step(stage, workers, prepared=...)`` says which move is due (at Preparing: none until the
backend says the job is prepared), ``stage_after`` where it leads; the backend does the move (the
local backend spawns processes, Slurm's submits batch jobs, the memory backend marks its records
Running) and keeps the stage. What each backend keeps to itself: how it learns that a server
listens (``Seen.listening``), restarts of failed workers (its restart book) and when Stopping is
over (the local backend's stopper thread, Slurm's batch jobs gone). Tested once, in
``tests/unit/test_start_sequence.py``; the backends' conformance tests check the order they show.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from paddlecloud.backends.base import RENDEZVOUS
from paddlecloud.core.phases import WorkerState

__all__ = ["SERVER_ROLES", "Seen", "Stage", "Step", "next_step", "stage_after"]

#: what must listen before trainers start, and is stopped once they succeeded
SERVER_ROLES = ("pserver", RENDEZVOUS)


class Stage(StrEnum):
    PREPARING = "preparing"
    PSERVERS = "pservers"
    TRAINERS = "trainers"
    STOPPING = "stopping"
    DONE = "done"


class Step(StrEnum):
    WAIT = "wait"
    START_SERVERS = "start-servers"
    START_TRAINERS = "start-trainers"
    STOP_SERVERS = "stop-servers"


@dataclass(frozen=True)
class Seen:
    """One worker as the sequence sees it: ``listening`` is a server's readiness as its backend
    learns it (a mark its monitor writes, a port that answers); trainers' is not read."""

    name: str
    role: str
    state: WorkerState
    listening: bool = False

    @property
    def server(self) -> bool:
        return self.role in SERVER_ROLES


def next_step(stage: Stage, workers: Iterable[Seen], *, prepared: bool = False) -> Step:
    """The move due in ``stage``; at Preparing, nothing starts until the backend says the job is
    ``prepared`` (its package unpacked, its environment built)."""
    ws = list(workers)
    servers = [w for w in ws if w.server]
    if stage == Stage.PREPARING:
        if not prepared:
            return Step.WAIT
        return Step.START_SERVERS if servers else Step.START_TRAINERS
    if stage == Stage.PSERVERS:
        up = all(w.state == WorkerState.RUNNING and w.listening for w in servers)
        return Step.START_TRAINERS if up else Step.WAIT
    if stage == Stage.TRAINERS:
        trainers = [w for w in ws if w.role == "trainer"]
        done = bool(trainers) and all(w.state == WorkerState.SUCCEEDED for w in trainers)
        return Step.STOP_SERVERS if done else Step.WAIT
    return Step.WAIT


_AFTER = {
    Step.START_SERVERS: Stage.PSERVERS,
    Step.START_TRAINERS: Stage.TRAINERS,
    Step.STOP_SERVERS: Stage.STOPPING,
}


def stage_after(step: Step, stage: Stage) -> Stage:
    """The stage once ``step`` is done (``WAIT``: the same)."""
    return _AFTER.get(step, stage)
