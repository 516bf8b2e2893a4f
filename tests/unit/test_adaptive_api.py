"""Adaptive batch size through the API in-process: the spec's rules, ``GET .../adaptive`` and
``POST .../adaptive/report`` (who may call, the rate limit, finite numbers, the smoothed noise scale,
the bounded store of reports), and what ``describe`` carries."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from task_helpers import Bench, hold_trainers

from paddlecloud.api.adaptive import AdaptiveReport
from paddlecloud.api.errors import Conflict, ErrorCode, Forbidden, InvalidInput, NotFound, Unauthorized
from paddlecloud.client import Client
from paddlecloud.controller.services.adaptive import EMA_WEIGHT, KEEP_REPORTS, REPORT_INTERVAL_S
from paddlecloud.server import create_app
from paddlecloud.store.tables import AdaptiveReportRow

pytestmark = pytest.mark.timeout(60)

ADAPTIVE = {"size": 64, "adaptive": {"min": 32, "max": 1024}}


@pytest.fixture
def bench(tmp_path: Path) -> Iterator[Bench]:
    b = Bench(tmp_path)
    yield b
    b.close()


@pytest.fixture
def alice(bench: Bench) -> Client:
    return bench.user("alice")


def submit(bench: Bench, owner: Client, name: str, **spec: Any) -> None:
    """Submit ``name``; an adaptive one is held on one trainer (its reports' ``replicas``)."""
    bench.submit(owner, name, {"items": ["a"]}, **spec)
    if (spec.get("batch") or {}).get("adaptive"):
        hold_trainers(bench.platform, owner.whoami().name, name, 1)


def report(**over: Any) -> AdaptiveReport:
    body: dict[str, Any] = {
        "replicas": 1, "local_bsz": 64.0, "step_time_s": 0.5, "grad_sqr": 2.0, "grad_var": 40.0,
        "lr_gain": 1.0, "batch_size": 64,
    }  # fmt: skip
    return AdaptiveReport.model_validate(body | over)


# -- the spec -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("batch", "words"),
    [
        ({"size": 64, "adaptive": {"min": 128, "max": 64}}, "min <= max"),
        ({"size": 16, "adaptive": {"min": 32, "max": 64}}, "within the adaptive bounds"),
        ({"size": 0}, "greater than or equal to 1"),
        ({"size": 2**25}, "less than or equal to"),
        ({"size": 64, "lr_rule": "cubic"}, "adascale"),
        ({"size": "64"}, "valid integer"),
        ({"size": 64, "adaptive": {"min": 1, "max": 64}, "extra": 1}, "Extra inputs"),
    ],
    ids=["min-over-max", "size-outside", "zero", "too-large", "unknown-rule", "string", "extra"],
)
def test_bad_batch_specs_are_refused_with_invalid_spec(
    bench: Bench, alice: Client, batch: dict[str, Any], words: str
) -> None:
    with pytest.raises(InvalidInput) as err:
        submit(bench, alice, "bad", batch=batch)
    assert err.value.code == ErrorCode.INVALID_SPEC
    assert words in str(err.value)
    assert (err.value.field or "").startswith("batch")


def test_describe_shows_the_batch_settings_and_state(bench: Bench, alice: Client) -> None:
    submit(bench, alice, "ada", batch={**ADAPTIVE, "lr_rule": "sqrt"})
    submit(bench, alice, "fixed", batch={"size": 64})
    submit(bench, alice, "plain")
    job = alice.job("ada")
    assert job.spec.batch is not None and job.spec.batch.lr_rule == "sqrt"
    assert job.adaptive is not None
    assert (job.adaptive.batch_size, job.adaptive.init, job.adaptive.min, job.adaptive.max) == (
        64,
        64,
        32,
        1024,
    )
    assert job.adaptive.reports == 0 and job.adaptive.noise_scale is None
    assert alice.job("fixed").adaptive is None and alice.job("plain").spec.batch is None


# -- who may call ---------------------------------------------------------------------------------


def test_the_job_token_and_the_owner_read_and_report(bench: Bench, alice: Client) -> None:
    submit(bench, alice, "ada", batch=ADAPTIVE)
    worker = bench.worker("alice", "ada")
    got = worker.adaptive_report("ada", report())
    assert got.reports == 1 and got.batch_size == 64 and got.step_time_s == 0.5 and got.lr_gain == 1.0
    assert got.noise_scale == pytest.approx(64 * 40.0 / 2.0)
    assert alice.adaptive("ada") == got == worker.adaptive("ada")
    bench.clock.advance(REPORT_INTERVAL_S)
    assert alice.adaptive_report("ada", report()).reports == 2  # the owner may report too


def test_other_jobs_and_users_see_nothing(bench: Bench, alice: Client) -> None:
    submit(bench, alice, "ada", batch=ADAPTIVE)
    submit(bench, alice, "other", batch=ADAPTIVE)
    bob = bench.user("bob")
    submit(bench, bob, "ada", batch=ADAPTIVE)  # the same name, another user's
    other_token = bench.worker("alice", "other")
    for call in (
        lambda: other_token.adaptive("ada"),
        lambda: other_token.adaptive_report("ada", report()),
        lambda: bob.adaptive("ada", user="alice"),  # not an admin
    ):
        with pytest.raises((NotFound, Forbidden)) as err:
            call()
        assert err.value.code in (ErrorCode.JOB_NOT_FOUND, ErrorCode.FORBIDDEN)
    with pytest.raises(NotFound) as nf:
        other_token.adaptive("ada")
    assert nf.value.code == ErrorCode.JOB_NOT_FOUND
    carol = bench.user("carol")
    with pytest.raises(NotFound):  # a user token sees only its own jobs
        carol.adaptive("ada")
    with pytest.raises(Unauthorized):
        bench.client("pcj_not-a-token").adaptive("ada")
    assert alice.adaptive("ada").reports == 0  # nothing was stored by the refused calls
    root = bench.user("root", admin=True)
    assert root.adaptive("ada", user="alice").init == 64


def test_a_fixed_batch_job_is_not_adaptive(bench: Bench, alice: Client) -> None:
    submit(bench, alice, "fixed", batch={"size": 64})
    submit(bench, alice, "plain")
    for name in ("fixed", "plain"):
        with pytest.raises(Conflict) as err:
            alice.adaptive(name)
        assert err.value.code == ErrorCode.NOT_ADAPTIVE
        with pytest.raises(Conflict):
            bench.worker("alice", name).adaptive_report(name, report())


# -- reports --------------------------------------------------------------------------------------


def test_one_report_per_interval_is_stored_and_noise_is_smoothed(bench: Bench, alice: Client) -> None:
    submit(bench, alice, "ada", batch=ADAPTIVE)
    worker = bench.worker("alice", "ada")
    assert worker.adaptive_report("ada", report(grad_var=40.0)).reports == 1
    bench.clock.advance(REPORT_INTERVAL_S - 0.5)
    early = worker.adaptive_report("ada", report(grad_var=400.0, step_time_s=9.0))
    assert early.reports == 1 and early.step_time_s == 0.5  # answered, not stored
    bench.clock.advance(0.5)
    got = worker.adaptive_report("ada", report(grad_var=400.0, lr_gain=3.5))
    assert got.reports == 2 and got.lr_gain == 3.5
    var = (1 - EMA_WEIGHT) * 40.0 + EMA_WEIGHT * 400.0
    assert got.noise_scale == pytest.approx(64 * var / 2.0)


def test_reports_kept_are_bounded(bench: Bench, alice: Client) -> None:
    submit(bench, alice, "ada", batch=ADAPTIVE)
    worker = bench.worker("alice", "ada")
    for _ in range(KEEP_REPORTS + 5):
        worker.adaptive_report("ada", report())
        bench.clock.advance(REPORT_INTERVAL_S)
    assert alice.adaptive("ada").reports == KEEP_REPORTS + 5
    with bench.platform.ctx.session() as s:
        assert s.scalar(select(func.count()).select_from(AdaptiveReportRow)) == KEEP_REPORTS


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("step_time_s", "NaN"),
        ("grad_sqr", "Infinity"),
        ("local_bsz", "-Infinity"),
        ("step_time_s", "0"),
        ("replicas", "0"),
        ("lr_gain", "0.5"),
        ("grad_var", "-1"),
        ("grad_var", "1e300"),
    ],
)
def test_bad_reports_are_422(bench: Bench, alice: Client, field: str, value: str) -> None:
    submit(bench, alice, "ada", batch=ADAPTIVE)
    token = bench.job_token("alice", "ada")
    body = report().model_dump(mode="json")
    text = ", ".join(f'"{k}": {value if k == field else _json(v)}' for k, v in body.items())
    http = TestClient(create_app(bench.platform, run_loop=False))
    r = http.post(
        "/api/v1/jobs/ada/adaptive/report",
        content="{" + text + "}",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid_request"
    assert r.json()["error"]["field"] == field
    assert alice.adaptive("ada").reports == 0


def _json(v: object) -> str:
    if v is None:
        return "null"
    assert not (isinstance(v, float) and not math.isfinite(v))
    return str(v)


def test_a_report_at_another_replica_count_than_the_trainers_is_not_fitted(
    bench: Bench, alice: Client
) -> None:
    """Its step time is not stored (a worker group still at its old size, or a job claiming more
    replicas than it runs: it would inflate its speed-up); its gradient statistics count."""
    submit(bench, alice, "ada", batch=ADAPTIVE)  # held on 1 trainer
    worker = bench.worker("alice", "ada")
    inflated = worker.adaptive_report("ada", report(replicas=64, step_time_s=0.01, grad_var=80.0))
    assert inflated.reports == 1 and inflated.step_time_s is None
    assert inflated.noise_scale == pytest.approx(64 * 80.0 / 2.0)
    hold_trainers(bench.platform, "alice", "ada", 0)  # queued again: nothing to fit against
    bench.clock.advance(REPORT_INTERVAL_S)
    assert worker.adaptive_report("ada", report()).step_time_s is None
    with bench.platform.ctx.session() as s:
        assert s.scalar(select(func.count()).select_from(AdaptiveReportRow)) == 0
    hold_trainers(bench.platform, "alice", "ada", 1)
    bench.clock.advance(REPORT_INTERVAL_S)
    assert worker.adaptive_report("ada", report()).step_time_s == 0.5
    with bench.platform.ctx.session() as s:
        rows = s.scalars(select(AdaptiveReportRow)).all()
        assert [(r.replicas, r.step_time_s) for r in rows] == [(1, 0.5)]
