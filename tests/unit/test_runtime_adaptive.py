"""``paddlecloud.runtime.adaptive``: the noise estimator on gradients of known noise, the batch split,
the LR rules (and that AdaScale's gain is the scheduler's goodput model's), the assignment read from the
API or the env, and the reporter's rate limit and its indifference to a dead or slow server; a new
batch during the training: the replicas' agreement (one summed vector) and the live batch sampler.

Without torch: the estimator is fed squared norms of synthetic gradients (numpy); the DDP hook that
measures them in a job runs in tests/e2e/test_adaptive_torch.py.
"""

from __future__ import annotations

import http.server
import json
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from paddlecloud.runtime import adaptive
from paddlecloud.runtime.adaptive import (
    AdaptiveApiError,
    Assignment,
    JobApi,
    LiveBatchSampler,
    NoiseEstimator,
    Reporter,
    agreed,
    lr_gain,
    plan,
    proposed_batch,
    read_assignment,
    rebatch,
    sync_vector,
    two_batch_estimate,
)
from paddlecloud.scheduler.goodput import efficiency

# --- the estimator ------------------------------------------------------------------------------

DIM = 50
G = np.linspace(-1.0, 1.0, DIM) * 0.2  # |G|² = 0.69
SIGMA = 0.9  # per-sample noise: tr(Σ) = DIM σ² = 40.5; B_noise = tr(Σ) / |G|² ≈ 59 samples
TRUE_SQR = float(G @ G)
TRUE_VAR = DIM * SIGMA**2
TRUE_NOISE = TRUE_VAR / TRUE_SQR


def _mean_gradient(rng: np.random.Generator, rows: int) -> np.ndarray:
    return G + rng.normal(0.0, SIGMA, (rows, DIM)).mean(axis=0)


def _run(replicas: int, local: int, steps: int, init: int, seed: int) -> NoiseEstimator:
    """What AdaptiveDDP feeds the estimator: per replica |g_local|², and |g_global|² of the average;
    every 10 steps the replicas' windows are averaged (the all-reduce) and folded in."""
    rng = np.random.default_rng(seed)
    est = [NoiseEstimator(init) for _ in range(replicas)]
    for step in range(1, steps + 1):
        grads = [_mean_gradient(rng, local) for _ in range(replicas)]
        total = np.mean(grads, axis=0)
        for e, g in zip(est, grads, strict=True):
            e.measure(float(g @ g), local, float(total @ total), local * replicas)
        if step % 10 == 0:
            windows = np.array([e.window() for e in est]).mean(axis=0)
            for e in est:
                e.update(*windows)
    assert all(e.state_dict() == est[0].state_dict() for e in est)  # the replicas agree
    return est[0]


@pytest.mark.parametrize(("replicas", "local"), [(4, 16), (2, 64), (8, 8)])
def test_the_noise_scale_of_known_gradient_noise_is_found_within_a_factor(replicas: int, local: int) -> None:
    est = _run(replicas, local, steps=400, init=32, seed=replicas)
    assert est.noise_scale is not None and est.grad_sqr is not None and est.grad_var is not None
    assert TRUE_NOISE / 1.5 < est.noise_scale < TRUE_NOISE * 1.5, (est.noise_scale, TRUE_NOISE)
    assert TRUE_SQR / 1.5 < est.grad_sqr < TRUE_SQR * 1.5
    # grad_var is tr(Σ) at the initial batch (the Pollux traces' meaning): noise = init var / sqr
    assert TRUE_VAR / 32 / 1.5 < est.grad_var < TRUE_VAR / 32 * 1.5
    assert est.noise_scale == pytest.approx(32 * est.grad_var / est.grad_sqr)


def test_one_replica_measures_with_its_micro_batches() -> None:
    """One replica: a micro-batch of the accumulation (or half the batch) against the whole batch."""
    rng = np.random.default_rng(7)
    est = NoiseEstimator(init=64)
    for step in range(1, 401):
        first, second = _mean_gradient(rng, 32), _mean_gradient(rng, 32)
        whole = (first + second) / 2
        est.measure(float(first @ first), 32, float(whole @ whole), 64)
        if step % 10 == 0:
            est.update(*est.window())
    assert est.noise_scale is not None
    assert TRUE_NOISE / 1.5 < est.noise_scale < TRUE_NOISE * 1.5


def test_the_two_batch_estimate_is_exact_on_expected_norms() -> None:
    b, big = 16, 128
    sqr, var = two_batch_estimate(TRUE_SQR + TRUE_VAR / b, b, TRUE_SQR + TRUE_VAR / big, big)
    assert (sqr, var) == (pytest.approx(TRUE_SQR), pytest.approx(TRUE_VAR))
    with pytest.raises(ValueError, match="small < big"):
        two_batch_estimate(1.0, 8, 1.0, 8)


def test_the_estimate_is_smoothed_resumable_and_unknown_before_a_window() -> None:
    est = NoiseEstimator(init=8, smoothing=0.9)
    assert (est.grad_sqr, est.grad_var, est.noise_scale) == (None, None, None)
    est.measure(2.0, 4, 1.0, 8)  # sqr 0, var 8: all noise
    est.measure(math.nan, 4, 1.0, 8)  # a non-finite measurement is dropped
    assert est.window() == (0.0, 8.0, 1.0)
    est.update(*est.window())
    assert est.window() == (0.0, 0.0, 0.0)
    # |G|² measured at 0 (lost in the noise): the largest noise scale, not an unknown one
    assert est.grad_var == 1.0 and est.noise_scale == pytest.approx(adaptive.MAX_NOISE * 8)
    assert lr_gain("adascale", 4.0, est.grad_sqr, est.grad_var) == pytest.approx(4.0, rel=0.01)
    est.update(10.0, 0.0, 10)  # ten steps at |G|² 1, no noise: the earlier window still weighs in
    t = 0.9**10
    assert est.grad_sqr == pytest.approx((1 - t) / (t * 0.1 + 1 - t))
    assert est.grad_var == pytest.approx(t * 0.8 / (t * 0.1 + 1 - t) / 8)
    again = NoiseEstimator(init=8, smoothing=0.9)
    again.load_state_dict(est.state_dict())
    assert (again.grad_sqr, again.grad_var) == (est.grad_sqr, est.grad_var)


# --- the split and the learning rate ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("batch", "replicas", "max_local", "micro", "steps"),
    [
        (256, 4, None, 64, 1),
        (256, 4, 64, 64, 1),
        (256, 4, 32, 32, 2),
        (1000, 1, 64, 62, 16),  # 1000 / 16 = 62.5: 16 x 62 (the global batch becomes 992)
        (100, 3, None, 33, 1),
        (2, 4, None, 1, 1),  # fewer samples than replicas: one each
        (4096, 2, 256, 256, 8),
    ],
)
def test_a_global_batch_is_split_into_micro_batches_and_accumulation(
    batch: int, replicas: int, max_local: int | None, micro: int, steps: int
) -> None:
    p = plan(batch, replicas, max_local)
    assert (p.micro, p.accum_steps) == (micro, steps)
    assert p.local == micro * steps and p.batch == p.local * replicas
    assert max_local is None or p.micro <= max_local
    assert abs(p.batch - batch) <= replicas * steps  # what splits evenly, as close as it gets


@pytest.mark.parametrize(("batch", "replicas", "max_local"), [(0, 1, None), (8, 0, None), (8, 1, 0)])
def test_a_split_of_nothing_is_refused(batch: int, replicas: int, max_local: int | None) -> None:
    with pytest.raises(ValueError, match=">= 1"):
        plan(batch, replicas, max_local)


def test_the_lr_rules() -> None:
    assert lr_gain("linear", 8.0, 1.0, 1.0) == 8.0
    assert lr_gain("sqrt", 9.0) == 3.0
    assert lr_gain("none", 8.0, 1.0, 1.0) == 1.0
    assert lr_gain("adascale", 8.0) == 1.0  # nothing measured yet: as the initial batch
    assert lr_gain("adascale", 8.0, 1.0, 0.0) == 1.0  # no noise: a bigger batch is no better a step
    assert lr_gain("adascale", 8.0, 0.0, 1.0) == pytest.approx(8.0)  # all noise: as good as 8 steps
    assert lr_gain("adascale", 1.0, 0.3, 0.7) == pytest.approx(1.0)
    assert 1.0 < lr_gain("adascale", 8.0, 1.0, 1.0) < 8.0
    assert lr_gain("adascale", 0.5, 1.0, 1.0) < 1.0  # under the initial batch: a smaller step


@pytest.mark.parametrize("noise", [5.0, 59.0, 800.0])
@pytest.mark.parametrize("scale", [0.5, 2.0, 8.0, 32.0])
def test_adascale_gain_is_the_scheduler_models_gain(noise: float, scale: float) -> None:
    """The runtime's gain and goodput.py's r = S x efficiency must agree, or the scheduler would plan
    progress the job does not make."""
    init = 64
    sqr = 0.25
    var = noise * sqr / init  # grad_var at the initial batch
    expected = scale * efficiency(noise, init, scale * init)
    assert lr_gain("adascale", scale, sqr, var) == pytest.approx(expected)


# --- the assignment ---------------------------------------------------------------------------------

ADAPTIVE_ENV = {
    "PADDLECLOUD_BATCH_SIZE": "128",
    "PADDLECLOUD_BATCH_INIT": "64",
    "PADDLECLOUD_BATCH_MIN": "32",
    "PADDLECLOUD_BATCH_MAX": "1024",
    "PADDLECLOUD_LR_RULE": "sqrt",
}


def test_the_assignment_from_the_env_or_the_programs_default() -> None:
    a = Assignment.from_env(ADAPTIVE_ENV, default_batch=32)
    assert (a.batch_size, a.init, a.lo, a.hi, a.lr_rule, a.adaptive, a.source) == (
        128, 64, 32, 1024, "sqrt", True, "env"
    )  # fmt: skip
    assert a.scale == 2.0
    fixed = Assignment.from_env({"PADDLECLOUD_BATCH_SIZE": "96"}, default_batch=32)
    assert (fixed.batch_size, fixed.init, fixed.adaptive) == (96, 96, False)
    default = Assignment.from_env({}, default_batch=32, lr_rule="linear")
    assert (default.batch_size, default.lr_rule, default.source) == (32, "linear", "default")
    odd = Assignment.from_env(
        {**ADAPTIVE_ENV, "PADDLECLOUD_LR_RULE": "cubic", "PADDLECLOUD_BATCH_SIZE": "?"}, 32
    )
    assert (odd.lr_rule, odd.batch_size) == ("adascale", 64)  # unknown: the defaults, said on stderr


STATE = {"batch_size": 512, "init": 64, "min": 32, "max": 1024, "lr_rule": "adascale", "trainers": 4,
         "noise_scale": 900.0, "lr_gain": 5.1, "step_time_s": 0.1, "reports": 3}  # fmt: skip


class FakeServer:
    """The two endpoints of the contract over real HTTP on loopback, scriptable."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str, Any]] = []
        self.status, self.body = 200, STATE
        self.delay = 0.0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                outer.requests.append((self.command, self.path, self.headers["Authorization"], body))
                time.sleep(outer.delay)
                data = json.dumps(outer.body).encode()
                self.send_response(outer.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        class Quiet(http.server.ThreadingHTTPServer):
            daemon_threads, block_on_close = True, False

            def handle_error(self, request: Any, client_address: Any) -> None:
                pass  # a client that gave up on a slow answer (what the timeout test does)

        self.httpd = Quiet(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def api(self, timeout: float = 3.0) -> JobApi:
        return JobApi(self.url, "pcj_secret", "my job", timeout=timeout)


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    srv = FakeServer()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


def test_the_assignment_is_read_from_the_api_with_the_job_token(fake: FakeServer) -> None:
    a = read_assignment(fake.api(), ADAPTIVE_ENV, default_batch=32)
    assert (a.batch_size, a.init, a.lo, a.hi, a.lr_rule, a.adaptive, a.source) == (
        512, 64, 32, 1024, "adascale", True, "api"
    )  # fmt: skip
    assert fake.requests == [("GET", "/api/v1/jobs/my%20job/adaptive", "Bearer pcj_secret", None)]


def test_a_fixed_batch_job_keeps_its_batch(fake: FakeServer) -> None:
    fake.status, fake.body = 409, {"error": {"code": "not_adaptive", "message": "job x has a fixed batch"}}
    a = read_assignment(fake.api(), {"PADDLECLOUD_BATCH_SIZE": "96"}, default_batch=32)
    assert (a.batch_size, a.init, a.adaptive) == (96, 96, False)
    with pytest.raises(AdaptiveApiError) as err:
        fake.api().state()
    assert (err.value.code, err.value.status) == ("not_adaptive", 409)


def test_an_unreachable_or_slow_server_leaves_the_batch_the_worker_started_with(
    fake: FakeServer, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = JobApi("http://127.0.0.1:9", "pcj_secret", "job", timeout=1)  # discard port: refused
    started = time.monotonic()
    a = read_assignment(dead, ADAPTIVE_ENV, default_batch=32)
    assert (a.batch_size, a.source) == (128, "env")
    fake.delay = 1.5
    slow = read_assignment(fake.api(timeout=0.3), ADAPTIVE_ENV, default_batch=32)
    assert (slow.batch_size, slow.source) == (128, "env")
    assert time.monotonic() - started < 1.5  # bounded: the training is not held up
    assert capsys.readouterr().err.count("cannot read the assigned batch") == 2
    fake.delay, fake.body = 0.0, {"batch_size": 1}  # an answer without the fields: the env's
    assert read_assignment(fake.api(), ADAPTIVE_ENV, 32).batch_size == 128


def test_the_api_is_found_from_the_env_contract() -> None:
    env = {"PADDLECLOUD_API": "http://h:1/", "PADDLECLOUD_JOB_TOKEN": "pcj_x", "PADDLECLOUD_JOB_NAME": "j"}
    api = JobApi.from_env(env)
    assert api is not None and (api.url, api.token, api.job) == ("http://h:1", "pcj_x", "j")
    assert JobApi.from_env({"PADDLECLOUD_API": "http://h:1"}) is None  # outside a job: no reports


# --- the reporter ----------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_reports_are_rate_limited_and_carry_the_latest_numbers(fake: FakeServer) -> None:
    clock = Clock()
    reporter = Reporter(fake.api().report, every=10.0, first_after=2.0, clock=clock)
    built: list[int] = []

    def build() -> dict[str, Any]:
        built.append(len(built))
        return {"replicas": 1, "step": len(built)}

    assert not reporter.offer(build)  # not yet: the first report waits first_after
    clock.now += 2.0
    assert reporter.offer(build)
    assert reporter.flush(5)
    for _ in range(5):  # every step offers one; nothing goes out within 10 s
        clock.now += 1.9
        assert not reporter.offer(build)
    clock.now += 0.6
    assert reporter.offer(build)
    assert reporter.flush(5)
    assert built == [0, 1]  # only the reports sent were built
    posts = [r for r in fake.requests if r[0] == "POST"]
    assert [p[3] for p in posts] == [{"replicas": 1, "step": 1}, {"replicas": 1, "step": 2}]
    assert posts[0][1:3] == ("/api/v1/jobs/my%20job/adaptive/report", "Bearer pcj_secret")
    assert reporter.answer == STATE and reporter.sent == 2
    assert not reporter.offer(lambda: None)  # nothing to say is not a report
    reporter.close()
    clock.now += 100
    assert not reporter.offer(build)  # closed: nothing more


def test_a_dead_server_never_fails_or_holds_up_the_training(capsys: pytest.CaptureFixture[str]) -> None:
    clock = Clock()
    gate = threading.Event()
    calls: list[dict[str, Any]] = []

    def send(body: dict[str, Any]) -> dict[str, Any]:
        calls.append(body)
        if len(calls) == 1:
            gate.wait(5)  # a server that hangs (up to JobApi's timeout in real life)
        if len(calls) <= 3:
            raise AdaptiveApiError("http://127.0.0.1:9 unreachable: [Errno 111] Connection refused")
        return STATE

    reporter = Reporter(send, every=10.0, first_after=0.0, clock=clock)
    started = time.monotonic()
    assert reporter.offer(lambda: {"n": 0})
    while not calls:  # the thread has it
        assert time.monotonic() - started < 5
        time.sleep(0.01)
    started = time.monotonic()
    for i in range(1, 4):  # the first send hangs: offering the next ones does not wait for it
        clock.now += 10
        assert reporter.offer(lambda i=i: {"n": i})
    assert time.monotonic() - started < 0.5
    gate.set()
    assert reporter.flush(5)
    # the reports queued while one hung were replaced by the newest; three failures, then it recovers
    assert calls[0] == {"n": 0} and calls[-1] == {"n": 3} and len(calls) <= 3
    for i in range(4, 7):
        clock.now += 10
        assert reporter.offer(lambda i=i: {"n": i})
        assert reporter.flush(5)
    err = capsys.readouterr().err
    assert err.count("reporting to the server failed") == 1  # logged once, not per report
    assert err.count("reporting to the server works again") == 1
    assert reporter.failed == 3 and reporter.sent == len(calls) - 3


def test_reports_to_a_refused_port_are_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    dead = JobApi("http://127.0.0.1:9", "pcj_x", "job", timeout=1)
    reporter = Reporter(dead.report, every=0.0, first_after=0.0)
    started = time.monotonic()
    assert reporter.offer(lambda: {"replicas": 1})
    assert reporter.flush(3)
    reporter.close()
    assert time.monotonic() - started < 3
    assert reporter.failed == 1 and "unreachable" in capsys.readouterr().err


# --- a new batch during the training ---------------------------------------------------------------

ADAPTIVE = Assignment(32, 32, 32, 1024, adaptive=True, source="api")


def _allreduce(vectors: list[list[float]]) -> list[float]:
    """What ``all_reduce`` (sum) leaves on every replica."""
    return [sum(col) for col in zip(*vectors, strict=True)]


@pytest.mark.parametrize("world", [1, 2, 4])
def test_every_replica_agrees_on_rank_0s_batch_and_the_mean_window(world: int) -> None:
    # each replica measured its own window and may have read something else (a stale or a newer
    # answer): only rank 0's read counts, and every replica decodes the same sum
    windows = [(1.0 + r, 10.0 * r, 10.0) for r in range(world)]
    reads = [160, 96, 0, 512][:world]
    summed = _allreduce([sync_vector(windows[r], reads[r], r) for r in range(world)])
    decoded = {agreed(summed, world) for _ in range(world)}
    assert len(decoded) == 1
    (sqr, var, steps), batch = decoded.pop()
    assert batch == 160
    assert (sqr, var, steps) == pytest.approx(
        (sum(w[0] for w in windows) / world, sum(w[1] for w in windows) / world, 10.0)
    )
    none = _allreduce([sync_vector(windows[r], 0, r) for r in range(world)])
    assert agreed(none, world)[1] == 0  # rank 0 read nothing yet: no change


def test_an_agreed_batch_is_switched_to_within_the_jobs_bounds() -> None:
    assert rebatch(ADAPTIVE, 160) == Assignment(160, 32, 32, 1024, adaptive=True, source="api")
    big = Assignment(512, 32, 32, 1024, adaptive=True, source="env")
    clamped = [rebatch(ADAPTIVE, 4096), rebatch(big, 8)]
    assert [a.batch_size if a else None for a in clamped] == [1024, 32]
    assert rebatch(ADAPTIVE, 32) is None  # the batch trained at now
    assert rebatch(ADAPTIVE, 0) is None  # no proposal
    assert rebatch(Assignment(32, 32, 32, 32), 160) is None  # a fixed-batch job never switches


def test_a_batch_assigned_for_another_trainer_count_waits_for_the_restart() -> None:
    assert proposed_batch({**STATE, "trainers": 4}, 4) == 512
    assert proposed_batch({**STATE, "trainers": 4}, 1) == 0  # a grow is on its way: torchrun restarts
    assert proposed_batch({**STATE, "trainers": 0}, 2) == 512  # not placed yet: take it
    assert proposed_batch(None, 2) == proposed_batch({}, 2) == 0
    assert proposed_batch({"batch_size": "many", "trainers": 1}, 1) == 0


def test_the_live_batch_sampler_takes_a_new_size_from_the_next_batch() -> None:
    size = [4]
    batches = []
    for batch in LiveBatchSampler(range(20), lambda: size[0]):
        batches.append(batch)
        if len(batches) == 2:
            size[0] = 5
    assert [len(b) for b in batches] == [4, 4, 5, 5, 2]
    assert [i for b in batches for i in b] == list(range(20))  # nothing lost or repeated
    assert len(LiveBatchSampler(range(20), lambda: 6)) == 4
    assert len(LiveBatchSampler(range(20), lambda: 6, drop_last=True)) == 3
    assert [len(b) for b in LiveBatchSampler(range(7), lambda: 3, drop_last=True)] == [3, 3]


@pytest.mark.parametrize("world", [2, 3])
def test_replicas_switch_together_after_the_same_step(world: int) -> None:
    """The training loop's order on ``world`` replicas: a step per group of micro-batches, the
    all-reduce every ``sync`` steps, then the switch. Rank 0's poller sees the new batch at step
    13 (the others never read): every replica trains each step at the same local batch, and all
    switch after step 20, the first agreement after the read."""
    sync, rows = 10, 960
    state = [ADAPTIVE] * world
    seen: list[list[int]] = [[] for _ in range(world)]
    shards = [LiveBatchSampler(range(r, rows, world), lambda r=r: plan(state[r].batch_size, world).micro)
              for r in range(world)]  # fmt: skip
    iters = [iter(s) for s in shards]
    for step in range(1, 1000):
        try:
            for r in range(world):
                seen[r].append(len(next(iters[r])))
        except StopIteration:
            break
        read = 160 if step >= 13 else 32
        if step % sync == 0:
            summed = _allreduce([sync_vector((0.0, 0.0, 0.0), read, r) for r in range(world)])
            for r in range(world):
                new = rebatch(state[r], agreed(summed, world)[1])
                state[r] = new or state[r]
    assert all(s == seen[0] for s in seen)  # the same local batch at every step, everywhere
    switch = seen[0].index(plan(160, world).micro)
    assert switch == 20 and set(seen[0][:20]) == {plan(32, world).micro}


def test_the_torch_side_is_imported_only_on_use() -> None:
    with pytest.raises(AttributeError):
        adaptive.NoSuchThing  # noqa: B018
    assert "torch" not in adaptive.__dict__
