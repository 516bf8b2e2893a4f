"""The start sequence every backend follows (``backends/start_sequence.py``), tested once here: the
servers first, the trainers once every server listens, the servers stopped once every trainer
succeeded. The backends' own tests (tests/conformance) check that each shows this order."""

from __future__ import annotations

import pytest

from paddlecloud.backends.start_sequence import Seen, Stage, Step, next_step, stage_after
from paddlecloud.core.phases import WorkerState

__all__: list[str] = []

R, P, S, F = WorkerState.RUNNING, WorkerState.PENDING, WorkerState.SUCCEEDED, WorkerState.FAILED


def ps_job(ps: WorkerState, trainers: tuple[WorkerState, ...], listening: bool = True) -> list[Seen]:
    return [Seen("pserver-0", "pserver", ps, listening)] + [
        Seen(f"trainer-{i}", "trainer", s) for i, s in enumerate(trainers)
    ]


def test_a_prepared_job_starts_its_servers_first_or_its_trainers_when_it_has_none() -> None:
    assert next_step(Stage.PREPARING, ps_job(P, (P, P)), prepared=True) == Step.START_SERVERS
    store = [Seen("rendezvous-0", "rendezvous", P), Seen("trainer-0", "trainer", P)]
    assert next_step(Stage.PREPARING, store, prepared=True) == Step.START_SERVERS  # elastic torch's store
    trainers_only = [Seen("trainer-0", "trainer", P)]
    assert next_step(Stage.PREPARING, trainers_only, prepared=True) == Step.START_TRAINERS
    assert stage_after(Step.START_SERVERS, Stage.PREPARING) == Stage.PSERVERS
    assert stage_after(Step.START_TRAINERS, Stage.PREPARING) == Stage.TRAINERS


def test_nothing_starts_while_the_job_is_still_preparing() -> None:
    # a sync while the environment is built must not start a worker without it
    assert next_step(Stage.PREPARING, ps_job(P, (P, P))) == Step.WAIT
    assert next_step(Stage.PREPARING, [Seen("trainer-0", "trainer", P)]) == Step.WAIT


@pytest.mark.parametrize(
    ("ps", "listening", "step"),
    [
        (P, False, Step.WAIT),  # not started yet
        (R, False, Step.WAIT),  # runs but does not listen yet: trainers would find no server
        (F, False, Step.WAIT),  # failed: its restart (the backend's) comes first
        (R, True, Step.START_TRAINERS),
    ],
)
def test_trainers_start_only_once_every_server_runs_and_listens(
    ps: WorkerState, listening: bool, step: Step
) -> None:
    seen = [*ps_job(ps, (P, P), listening), Seen("pserver-1", "pserver", R, True)]
    assert next_step(Stage.PSERVERS, seen) == step


def test_a_running_trainer_does_not_count_as_a_listening_server() -> None:
    # ``listening`` is read for servers only: a trainer flagged so changes nothing
    seen = [Seen("pserver-0", "pserver", R, False), Seen("trainer-0", "trainer", R, True)]
    assert next_step(Stage.PSERVERS, seen) == Step.WAIT


def test_the_servers_stop_once_every_trainer_succeeded() -> None:
    assert next_step(Stage.TRAINERS, ps_job(R, (S, R))) == Step.WAIT
    assert next_step(Stage.TRAINERS, ps_job(R, (S, F))) == Step.WAIT  # a restart is the backend's
    assert next_step(Stage.TRAINERS, ps_job(R, (S, S))) == Step.STOP_SERVERS
    assert next_step(Stage.TRAINERS, ps_job(R, ())) == Step.WAIT  # no trainer: nothing succeeded
    assert stage_after(Step.STOP_SERVERS, Stage.TRAINERS) == Stage.STOPPING


@pytest.mark.parametrize("stage", [Stage.STOPPING, Stage.DONE])
def test_nothing_starts_once_the_job_stops(stage: Stage) -> None:
    assert next_step(stage, ps_job(P, (P,))) == Step.WAIT
    assert stage_after(Step.WAIT, stage) == stage
