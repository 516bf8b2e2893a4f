"""core.restarts.decide: restart or fail, by policy, exit, the job's and the worker's restart counts."""

from __future__ import annotations

import pytest

from paddlecloud.core.restarts import Exit, Fail, Restart, RestartPolicy, RestartRules, backoff, decide

NEVER, ON_FAILURE, EXIT_CODE = RestartPolicy.NEVER, RestartPolicy.ON_FAILURE, RestartPolicy.EXIT_CODE
RULES = RestartRules(max_restarts=2, retry_exit_codes=frozenset({75}), backoff_s=1.0, backoff_max_s=5.0)

CODE3, CODE75, CODE137 = Exit(3), Exit(75), Exit(137)
KILLED = Exit(137, signal=9)
LOST = Exit(None, pid=4242)


@pytest.mark.parametrize(
    ("policy", "ended", "job_restarts", "worker_restarts", "expected"),
    [
        # Never: every failure fails the job, with today's message
        (NEVER, CODE3, 0, 0, Fail("trainer-1 failed with exit code 3")),
        (NEVER, KILLED, 0, 0, Fail("trainer-1 was killed by signal 9 (SIGKILL)")),
        (NEVER, LOST, 0, 0, Fail("trainer-1 vanished without an exit status (pid 4242)")),
        # OnFailure: any failure, until the job's limit; the delay doubles per restart of the worker
        (ON_FAILURE, CODE3, 0, 0, Restart(1.0, 1, "")),
        (ON_FAILURE, CODE3, 1, 1, Restart(2.0, 1, "")),
        (ON_FAILURE, KILLED, 1, 0, Restart(1.0, 1, "")),
        (ON_FAILURE, LOST, 0, 0, Restart(1.0, 1, "")),
        (ON_FAILURE, CODE3, 2, 0, Fail("trainer-1 failed with exit code 3; restart limit 2 reached")),
        (
            ON_FAILURE,
            LOST,
            5,
            0,
            Fail("trainer-1 vanished without an exit status (pid 4242); restart limit 2 reached"),
        ),
        # ExitCode: signals, vanished processes and listed codes are retried; any other code fails fast
        (EXIT_CODE, KILLED, 0, 0, Restart(1.0, 1, "")),
        (EXIT_CODE, CODE137, 0, 0, Restart(1.0, 1, "")),  # the shell's 128 + SIGKILL
        (EXIT_CODE, LOST, 0, 0, Restart(1.0, 1, "")),
        (EXIT_CODE, CODE75, 1, 2, Restart(4.0, 1, "")),
        (
            EXIT_CODE,
            CODE3,
            0,
            0,
            Fail(
                "trainer-1 failed with exit code 3; exit code 3 is not retryable "
                "(ExitCode policy: signals and exit codes 75)"
            ),
        ),
        (EXIT_CODE, CODE75, 2, 0, Fail("trainer-1 failed with exit code 75; restart limit 2 reached")),
        (
            EXIT_CODE,
            KILLED,
            2,
            0,
            Fail("trainer-1 was killed by signal 9 (SIGKILL); restart limit 2 reached"),
        ),
    ],
)
def test_decide(
    policy: RestartPolicy,
    ended: Exit,
    job_restarts: int,
    worker_restarts: int,
    expected: Restart | Fail,
) -> None:
    got = decide(policy, RULES, "trainer-1", ended, job_restarts, 0, worker_restarts)
    if isinstance(expected, Fail):
        assert got == expected
    else:
        assert isinstance(got, Restart)
        assert (got.delay_s, got.run) == (expected.delay_s, expected.run)


def test_restart_message_names_the_worker_the_exit_the_run_and_the_delay() -> None:
    got = decide(ON_FAILURE, RULES, "trainer-1", CODE3, 1, 4, 0)
    assert got == Restart(
        1.0,
        5,
        "trainer-1 failed with exit code 3; restarting it as run 5 in 1 s "
        "(restart 2 of at most 2 for the job)",
    )
    killed = decide(EXIT_CODE, RULES, "pserver-0", KILLED, 0, 0, 0)
    assert isinstance(killed, Restart)
    assert killed.message.startswith("pserver-0 was killed by signal 9 (SIGKILL); restarting it as run 1")


@pytest.mark.parametrize(("worker_restarts", "delay"), [(0, 1.0), (1, 2.0), (2, 4.0), (3, 5.0), (500, 5.0)])
def test_backoff_doubles_up_to_the_cap(worker_restarts: int, delay: float) -> None:
    assert backoff(RULES, worker_restarts) == delay


def test_zero_backoff_and_zero_limit() -> None:
    rules = RestartRules(max_restarts=0, backoff_s=0.0)
    assert decide(ON_FAILURE, rules, "t", CODE3, 0, 0, 0) == Fail(
        "t failed with exit code 3; restart limit 0 reached"
    )
    fast = RestartRules(max_restarts=1, backoff_s=0.0)
    assert decide(ON_FAILURE, fast, "t", CODE3, 0, 0, 3) == Restart(
        0.0,
        1,
        "t failed with exit code 3; restarting it as run 1 in 0 s (restart 1 of at most 1 for the job)",
        streak=4,
    )


@pytest.mark.parametrize(
    ("ended", "killed_by"),
    [(Exit(0), None), (Exit(3), None), (Exit(128), None), (Exit(130), 2), (Exit(143), 15), (Exit(193), None),
     (Exit(137, signal=9), 9), (Exit(None), None)],
)  # fmt: skip
def test_killed_by_reads_the_shell_convention(ended: Exit, killed_by: int | None) -> None:
    assert ended.killed_by == killed_by


def test_rules_pick_the_policy_of_the_role() -> None:
    rules = RestartRules(trainer=ON_FAILURE, pserver=EXIT_CODE)
    assert (rules.policy("trainer"), rules.policy("pserver")) == (ON_FAILURE, EXIT_CODE)
    assert RestartRules().policy("trainer") == NEVER


# -- the backoff resets after a stable run ---------------------------------------------------------

#: reset after 600 s (the default); backoff 1, 2, 4, 5 (cap)
RESET = RestartRules(trainer=ON_FAILURE, max_restarts=100, backoff_s=1.0, backoff_max_s=5.0)


@pytest.mark.parametrize(
    ("ran_s", "streak", "delay", "next_streak", "note"),
    [
        (None, 0, 1.0, 1, False),  # duration unknown: doubling as before
        (None, 3, 5.0, 4, False),
        (3.0, 0, 1.0, 1, False),  # crash-looping: 1, 2, 4, 5, 5 ...
        (3.0, 1, 2.0, 2, False),
        (3.0, 2, 4.0, 3, False),
        (599.9, 7, 5.0, 8, False),  # just short of stable
        (600.0, 7, 1.0, 1, True),  # stable: back to backoff_s; the next failure doubles from there
        (86_400.0, 30, 1.0, 1, True),
        (600.0, 0, 1.0, 1, False),  # stable and never restarted: nothing to reset, nothing said
    ],
)
def test_a_stable_run_resets_the_backoff(
    ran_s: float | None, streak: int, delay: float, next_streak: int, note: bool
) -> None:
    got = decide(ON_FAILURE, RESET, "trainer-1", Exit(3, ran_s=ran_s), 10, 12, streak)
    assert isinstance(got, Restart)
    assert (got.delay_s, got.streak) == (delay, next_streak)
    assert ("backoff reset: the run lasted" in got.message) == note


def test_the_reset_names_the_run_length_and_keeps_the_jobs_limit() -> None:
    got = decide(ON_FAILURE, RESET, "trainer-1", Exit(3, ran_s=731.4), 10, 12, 5)
    assert got == Restart(
        1.0,
        13,
        "trainer-1 failed with exit code 3; restarting it as run 13 in 1 s "
        "(restart 11 of at most 100 for the job; backoff reset: the run lasted 731 s)",
        streak=1,
    )
    # the job's restart limit is not reset by a stable run
    limited = RestartRules(trainer=ON_FAILURE, max_restarts=2)
    assert decide(ON_FAILURE, limited, "t", Exit(3, ran_s=10_000.0), 2, 5, 4) == Fail(
        "t failed with exit code 3; restart limit 2 reached"
    )


@pytest.mark.parametrize(
    ("reset_s", "ran_s", "delay"), [(0.0, 0.0, 1.0), (60.0, 59.0, 4.0), (60.0, 60.0, 1.0)]
)
def test_the_reset_period_is_the_jobs_setting(reset_s: float, ran_s: float, delay: float) -> None:
    rules = RestartRules(trainer=ON_FAILURE, backoff_s=1.0, backoff_max_s=30.0, backoff_reset_s=reset_s)
    got = decide(ON_FAILURE, rules, "t", Exit(3, ran_s=ran_s), 0, 2, 2)
    assert isinstance(got, Restart) and got.delay_s == delay
