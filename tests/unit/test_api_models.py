"""api.models.JobSpec: validation errors name the field and the rule."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from paddlecloud.api.models import Framework, JobSpec, TrainerSpec

PKG = "/pfs/local/home/alice/jobs/fit-a-line/package.tar.gz"


def spec(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "fit-a-line", "package": PKG, "entry": "python train.py"}
    body.update(over)
    return body


def locs(exc: ValidationError) -> list[tuple[Any, ...]]:
    return [tuple(e["loc"]) for e in exc.errors()]


def test_defaults() -> None:
    s = JobSpec.model_validate(spec())
    assert s.framework == Framework.NONE
    assert (s.trainers.count, s.trainers.cpu, s.trainers.memory, s.trainers.gpu) == (1, "500m", "512Mi", 0)
    assert s.pservers.count == 0
    assert s.env == {}
    assert s.priority == 0
    assert (s.trainers.restart, s.pservers.restart) == (None, "Never")  # None: the platform default
    rules = s.restart_rules()
    assert (rules.trainer, rules.pserver) == ("Never", "Never")
    assert (rules.max_restarts, rules.retry_exit_codes) == (3, frozenset())
    assert (rules.backoff_s, rules.backoff_max_s) == (1.0, 30.0)


def test_elastic_torch_trainers_restart_on_failure_by_default() -> None:
    base = {"name": "t", "entry": "torchrun train.py", "package": "/pfs/local/x", "framework": "torch"}
    elastic = JobSpec.model_validate({**base, "trainers": {"count": 2, "min": 1, "max": 4}})
    assert elastic.restart_rules().trainer == "OnFailure"
    fixed = JobSpec.model_validate({**base, "trainers": {"count": 2}})
    assert fixed.restart_rules().trainer == "Never"
    chosen = JobSpec.model_validate(
        {**base, "trainers": {"count": 2, "min": 1, "max": 4, "restart": "Never"}}
    )
    assert chosen.restart_rules().trainer == "Never"
    # an agent that failed rejoins at once (the survivors' next rendezvous round waits for it)
    assert (elastic.restart_rules().backoff_s, fixed.restart_rules().backoff_s) == (0.0, 1.0)
    slow = JobSpec.model_validate(
        {**base, "trainers": {"count": 2, "min": 1, "max": 4}, "restart_backoff_s": 2}
    )
    assert slow.restart_rules().backoff_s == 2.0


def test_restart_rules_from_the_spec() -> None:
    s = JobSpec.model_validate(
        spec(
            trainers={"restart": "ExitCode"},
            retry_exit_codes=[75, 3, 75],
            max_restarts=5,
            restart_backoff_s=0.5,
        )
    )
    assert s.retry_exit_codes == [3, 75]
    rules = s.restart_rules()
    assert (rules.trainer, rules.pserver) == ("ExitCode", "Never")
    assert (rules.max_restarts, rules.retry_exit_codes, rules.backoff_s) == (5, frozenset({3, 75}), 0.5)


@pytest.mark.parametrize(
    "over",
    [
        {"framework": "paddle-ps", "pservers": {"count": 2}, "trainers": {"count": 2}},
        {"framework": "paddle-collective", "trainers": {"count": 4, "gpu": 1}},
        {"framework": "torch", "trainers": {"count": 2, "cpu": "2", "memory": "1Gi"}},
        {"trainers": {"count": 2, "min": 1, "max": 4}},
        {"trainers": {"count": 3, "min": 3, "max": 3}},
        {"env": {"A": "1", "_B2": "x"}},
        {"priority": -1000},
        {"name": "a" * 63},
        {"trainers": {"restart": "OnFailure"}, "max_restarts": 0},
        {"trainers": {"restart": "ExitCode"}, "retry_exit_codes": [75, 1, 255]},
        {"framework": "paddle-ps", "pservers": {"count": 1, "restart": "OnFailure"}},
        {"pservers": {"count": 1, "restart": "ExitCode"}, "retry_exit_codes": [3]},
        {"restart_backoff_s": 0, "restart_backoff_max_s": 0},
    ],
)
def test_valid_specs(over: dict[str, Any]) -> None:
    JobSpec.model_validate(spec(**over))


@pytest.mark.parametrize(
    ("over", "loc", "match"),
    [
        ({"name": "Fit_A_Line"}, ("name",), "DNS-1123"),
        ({"name": "a" * 64}, ("name",), "at most 63"),
        ({"name": "-x"}, ("name",), "DNS-1123"),
        ({"name": ""}, ("name",), "empty"),
        ({"package": "xyz"}, ("package",), "pattern"),
        ({"entry": ""}, ("entry",), "at least 1"),
        ({"framework": "tf"}, ("framework",), "paddle-ps"),
        ({"trainers": {"cpu": "1x"}}, ("trainers", "cpu"), "'1x' is not a valid cpu quantity"),
        ({"trainers": {"memory": "1Gb"}}, ("trainers", "memory"), "not a valid memory quantity"),
        ({"pservers": {"count": 1, "cpu": "-1"}}, ("pservers", "cpu"), "cpu quantity"),
        ({"pservers": {"memory": "abc"}}, ("pservers", "memory"), "memory quantity"),
        ({"trainers": {"count": 0}}, ("trainers", "count"), "greater than or equal to 1"),
        ({"trainers": {"gpu": 17}}, ("trainers", "gpu"), "less than or equal to 16"),
        ({"trainers": {"count": 1, "min": 2}}, ("trainers",), "min <= count <= max"),
        ({"trainers": {"count": 5, "max": 4}}, ("trainers",), "min <= count <= max"),
        ({"trainers": {"count": 2, "min": 3, "max": 4}}, ("trainers",), "3 <= 2 <= 4"),
        ({"env": {"1BAD": "x"}}, ("env",), "not a valid environment variable name"),
        ({"env": {"A-B": "x"}}, ("env",), "not a valid environment variable name"),
        ({"priority": 1001}, ("priority",), "less than or equal to 1000"),
        ({"framework": "paddle-ps"}, (), "needs at least 1 pserver"),
        ({"framework": "torch", "pservers": {"count": 1}}, (), "runs no pservers"),
        ({"framework": "paddle-collective", "pservers": {"count": 2}}, (), "runs no pservers"),
        ({"bogus": 1}, ("bogus",), "Extra inputs are not permitted"),
        ({"trainers": {"count": 1, "cpus": "1"}}, ("trainers", "cpus"), "Extra inputs"),
        ({"pservers": {"replicas": 1}}, ("pservers", "replicas"), "Extra inputs"),
        ({"trainers": {"restart": "Always"}}, ("trainers", "restart"), "'Never', 'OnFailure' or 'ExitCode'"),
        ({"pservers": {"restart": "never"}}, ("pservers", "restart"), "'Never', 'OnFailure' or 'ExitCode'"),
        ({"max_restarts": -1}, ("max_restarts",), "greater than or equal to 0"),
        ({"max_restarts": 1001}, ("max_restarts",), "less than or equal to 1000"),
        (
            {"trainers": {"restart": "ExitCode"}, "retry_exit_codes": [0]},
            ("retry_exit_codes",),
            "exit codes are 1..255 (0 is success), got 0",
        ),
        ({"trainers": {"restart": "ExitCode"}, "retry_exit_codes": [256]}, ("retry_exit_codes",), "got 256"),
        (
            {"trainers": {"restart": "OnFailure"}, "retry_exit_codes": [75]},
            ("retry_exit_codes",),
            "only used by the ExitCode policy",
        ),
        ({"restart_backoff_s": -1}, ("restart_backoff_s",), "greater than or equal to 0"),
        (
            {"restart_backoff_s": 10, "restart_backoff_max_s": 5},
            ("restart_backoff_max_s",),
            "must be at least restart_backoff_s (10), got 5",
        ),
    ],
)
def test_invalid_specs_name_the_field(over: dict[str, Any], loc: tuple[Any, ...], match: str) -> None:
    with pytest.raises(ValidationError) as info:
        JobSpec.model_validate(spec(**over))
    errors = info.value.errors()
    assert locs(info.value) == [loc]
    assert match in errors[0]["msg"]


def test_missing_required_fields() -> None:
    with pytest.raises(ValidationError) as info:
        JobSpec.model_validate({})
    assert sorted(locs(info.value)) == [("entry",), ("name",), ("package",)]


def test_trainer_resources_parse_quantities() -> None:
    t = TrainerSpec(count=2, cpu="1500m", memory="2Gi", gpu=1)
    r = t.resources()
    assert (r.cpu_m, r.memory, r.gpu) == (1500, 2 * 2**30, 1)


def test_spec_json_round_trip() -> None:
    s = JobSpec.model_validate(spec(framework="paddle-ps", pservers={"count": 1}, env={"A": "1"}))
    again = JobSpec.model_validate(s.model_dump(mode="json"))
    assert again == s


@pytest.mark.parametrize("over", [{"name": "fit\n"}, {"env": {"FOO\n": "1"}}])
def test_trailing_newline_in_names_is_rejected(over: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        JobSpec.model_validate(spec(**over))
