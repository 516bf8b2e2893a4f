"""core.phases: the job state machine (next_phase, can_transition)."""

from __future__ import annotations

import pytest

from paddlecloud.core.phases import TERMINAL_PHASES, JobPhase, RoleCounts, can_transition, next_phase

Q, ST, RU, PR = JobPhase.QUEUED, JobPhase.STARTING, JobPhase.RUNNING, JobPhase.PREEMPTING
OK, FA, KI = JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.KILLED

NO_PS = RoleCounts()


def rc(desired: int = 0, running: int = 0, succeeded: int = 0, failed: int = 0) -> RoleCounts:
    return RoleCounts(desired=desired, running=running, succeeded=succeeded, failed=failed)


@pytest.mark.parametrize(
    ("current", "ps", "tr", "failure", "expected"),
    [
        # Starting -> Running once every trainer and pserver runs
        (ST, NO_PS, rc(2, running=2), None, (RU, "Running")),
        (ST, rc(2, running=2), rc(2, running=2), None, (RU, "Running")),
        (ST, rc(2, running=2), rc(2, running=1, succeeded=1), None, (RU, "Running")),
        # not yet: a trainer or a pserver is missing
        (ST, NO_PS, rc(2, running=1), None, None),
        (ST, rc(2, running=1), rc(2, running=2), None, None),
        (ST, rc(1), rc(1), None, None),
        # Running stays Running while trainers work
        (RU, rc(1, running=1), rc(2, running=2), None, None),
        (RU, NO_PS, rc(2, running=1, succeeded=1), None, None),
        # -> Succeeded when all trainers succeeded (also straight from Starting)
        (RU, rc(1, running=1), rc(2, succeeded=2), None, (OK, "Completed")),
        (ST, NO_PS, rc(1, succeeded=1), None, (OK, "Completed")),
        # failure -> Failed, even when the counts would say success
        (RU, NO_PS, rc(2, running=1, failed=1), "trainer-1 failed", (FA, "WorkerFailed")),
        (ST, NO_PS, rc(1), "preparing the job failed", (FA, "WorkerFailed")),
        (RU, NO_PS, rc(1, succeeded=1), "pserver-0 exited", (FA, "WorkerFailed")),
        # terminal phases never change
        (OK, NO_PS, rc(1, running=1), "boom", None),
        (FA, NO_PS, rc(1, succeeded=1), None, None),
        (KI, rc(1, running=1), rc(1, running=1), None, None),
        # Queued jobs are the scheduler's business, not next_phase's
        (Q, NO_PS, rc(1, running=1), None, None),
        (Q, NO_PS, rc(1, succeeded=1), "boom", None),
        # a Preempting job is being stopped by the platform: nothing it reports changes its phase
        (PR, NO_PS, rc(1, failed=1), "trainer-0 exited with code 143", None),
        (PR, NO_PS, rc(1, succeeded=1), None, None),
    ],
)
def test_next_phase(
    current: JobPhase,
    ps: RoleCounts,
    tr: RoleCounts,
    failure: str | None,
    expected: tuple[JobPhase, str] | None,
) -> None:
    change = next_phase(current, ps, tr, failure)
    if expected is None:
        assert change is None
    else:
        assert change is not None
        assert (change.phase, change.reason) == expected
        assert can_transition(current, change.phase)


def test_failure_message_is_passed_through() -> None:
    change = next_phase(RU, NO_PS, rc(1), "trainer-0 failed with exit code 3")
    assert change is not None
    assert change.message == "trainer-0 failed with exit code 3"


def test_success_and_running_messages_mention_counts() -> None:
    done = next_phase(RU, NO_PS, rc(3, succeeded=3), None)
    assert done is not None and "3" in done.message
    running = next_phase(ST, rc(2, running=2), rc(1, running=1), None)
    assert running is not None and "2 pservers" in running.message and "1 trainers" in running.message


@pytest.mark.parametrize(
    ("src", "dst", "ok"),
    [
        (Q, ST, True),
        (Q, KI, True),
        (Q, FA, True),
        (Q, RU, False),
        (Q, OK, False),
        (ST, RU, True),
        (ST, OK, True),
        (ST, FA, True),
        (ST, KI, True),
        (ST, Q, True),  # BackendUnavailable (the start not taken after all), NotAdopted
        (ST, PR, True),  # preempted: its processes are being stopped
        (PR, Q, True),  # ... all gone: queued again
        (PR, KI, True),
        (PR, RU, False),
        (PR, OK, False),
        (RU, OK, True),
        (RU, FA, True),
        (RU, KI, True),
        (RU, ST, False),
        (RU, Q, True),  # NotAdopted: a restarted server's backend cannot take it over
        (RU, PR, True),  # preempted
        (OK, RU, False),
        (FA, Q, False),
        (KI, RU, False),
        (OK, FA, False),
    ],
)
def test_can_transition(src: JobPhase, dst: JobPhase, ok: bool) -> None:
    assert can_transition(src, dst) is ok


@pytest.mark.parametrize("phase", list(JobPhase))
def test_every_phase_may_stay_where_it_is(phase: JobPhase) -> None:
    assert can_transition(phase, phase)


@pytest.mark.parametrize("terminal", sorted(TERMINAL_PHASES))
def test_terminal_phases_have_no_way_out(terminal: JobPhase) -> None:
    assert not any(can_transition(terminal, p) for p in JobPhase if p != terminal)


def test_terminal_set() -> None:
    assert frozenset({OK, FA, KI}) == TERMINAL_PHASES
