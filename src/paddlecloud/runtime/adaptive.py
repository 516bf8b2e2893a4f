"""Adaptive batch size inside a worker: the assigned batch, its split, the LR gain, the noise scale.

A job submitted with ``--adaptive-batch-size MIN:MAX`` lets the scheduler choose its global batch
(docs/env-contract.md, "Adaptive batch size"). Inside the job this module does the arithmetic and
the talking, standard library only; ``AdaptiveDDP`` (``runtime.adaptive_torch``; imported on first
use as ``paddlecloud.runtime.AdaptiveDDP``) drives a PyTorch DDP training loop with it::

    server ──GET /api/v1/jobs/{job}/adaptive──▶ Assignment (global batch now, initial, bounds, LR rule)
    Assignment, world size, max local batch ──plan()──▶ BatchSplit (local = micro batch x accumulation steps)
    |g|² at two batch sizes per step ──NoiseEstimator (window, then EMA)──▶ grad_sqr, grad_var
    grad_sqr, grad_var, batch / initial ──lr_gain()──▶ the learning-rate multiplier, progress
    rank 0 ──Reporter (rate-limited, background thread)──POST …/adaptive/report──▶ server
    rank 0 ──Reporter as a poller (GET …/adaptive every few s)──▶ the batch assigned now (a proposal)
    every replica's window + rank 0's proposal ──sync_vector, one all-reduce (sum)──agreed()──▶
        the same (noise window, batch) on every replica at the same step ──rebatch()──▶ new Assignment

The noise estimate is the two-batch-size estimator of McCandlish et al. (2018) used by AdaptDL: a
gradient averaged over ``b`` samples has ``E|g_b|² = |G|² + tr(Σ)/b``, so squared norms measured at
two sizes ``b < B`` give unbiased ``|G|²`` and ``tr(Σ)``. ``grad_var`` is reported at the job's
initial batch ``M0`` (``tr(Σ) / M0``, the Pollux traces' meaning), so the noise scale is
``M0 · grad_var / grad_sqr`` samples. Nothing here can fail the training: the server unreachable,
slow or refusing is logged once and training goes on with what the worker was started with.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from typing import Any

from paddlecloud.runtime import apiclient
from paddlecloud.runtime import contract as c

__all__ = [
    "LR_RULES",
    "MAX_NOISE",
    "AdaptiveApiError",
    "Assignment",
    "BatchSplit",
    "JobApi",
    "LiveBatchSampler",
    "NoiseEstimator",
    "Reporter",
    "agreed",
    "lr_gain",
    "plan",
    "proposed_batch",
    "read_assignment",
    "rebatch",
    "sync_vector",
    "two_batch_estimate",
]

#: the learning-rate rules a job may ask for (``submit --lr-rule``); see :func:`lr_gain`
LR_RULES = ("adascale", "linear", "sqrt", "none")


def _log(msg: str) -> None:
    print(f"paddlecloud.runtime.adaptive: {msg}", file=sys.stderr, flush=True)


# --- the assignment -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Assignment:
    """The global batch to train at now and the job's adaptive settings."""

    batch_size: int
    init: int
    lo: int
    hi: int
    lr_rule: str = "adascale"
    #: the scheduler may change the batch (``--adaptive-batch-size``); False: fixed at ``init``
    adaptive: bool = False
    #: where it came from: "api", "env" (what the worker was started with) or "default" (the program's)
    source: str = "default"

    @property
    def scale(self) -> float:
        """``S``: the batch relative to the initial one."""
        return self.batch_size / self.init

    @classmethod
    def from_env(cls, environ: Mapping[str, str], default_batch: int, lr_rule: str = "") -> Assignment:
        """What the worker was started with (``PADDLECLOUD_BATCH_*``), else the program's defaults."""

        def num(name: str, default: int) -> int:
            try:
                return max(1, int(environ.get(name, "") or default))
            except ValueError:
                return default

        if not environ.get(c.BATCH_SIZE) and not environ.get(c.BATCH_INIT):
            return cls(
                default_batch, default_batch, default_batch, default_batch, _rule(lr_rule or "adascale")
            )
        init = num(c.BATCH_INIT, num(c.BATCH_SIZE, default_batch))
        batch = num(c.BATCH_SIZE, init)
        lo, hi = num(c.BATCH_MIN, min(init, batch)), num(c.BATCH_MAX, max(init, batch))
        rule = _rule(environ.get(c.LR_RULE) or lr_rule or "adascale")
        return cls(batch, init, lo, hi, rule, adaptive=bool(environ.get(c.BATCH_MAX)), source="env")

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> Assignment:
        """From the API's AdaptiveState (``GET …/adaptive``)."""
        init = int(state["init"])
        return cls(
            int(state["batch_size"]), init, int(state.get("min", init)), int(state.get("max", init)),
            _rule(str(state.get("lr_rule", "adascale"))), adaptive=True, source="api",
        )  # fmt: skip


def _rule(name: str) -> str:
    if name not in LR_RULES:
        _log(f"unknown LR rule {name!r} (one of {', '.join(LR_RULES)}): using adascale")
        return "adascale"
    return name


class AdaptiveApiError(RuntimeError):
    """The server refused an adaptive request (``code``: the API's stable error code) or is unreachable."""

    def __init__(self, message: str, code: str = "", status: int = 0) -> None:
        super().__init__(message)
        self.code, self.status = code, status


@dataclass
class JobApi:
    """This job's adaptive endpoints, with its token (``PADDLECLOUD_API``, ``PADDLECLOUD_JOB_TOKEN``).
    Every request is bounded by ``timeout`` seconds and never goes through a proxy."""

    url: str
    token: str
    job: str
    ca: str = ""
    timeout: float = 3.0
    _opener: urllib.request.OpenerDirector = field(init=False, repr=False)

    def __post_init__(self) -> None:
        try:  # through the job's API socket when it has one (runtime.apiclient)
            self._opener = apiclient.opener(self.ca)
        except (OSError, ssl.SSLError) as exc:
            _log(f"cannot load the API's CA bundle {self.ca} ({c.API_CA}): {exc}; using the system's")
            self._opener = apiclient.opener()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, timeout: float = 3.0) -> JobApi | None:
        """None outside a PaddleCloud job (no API URL, token or job name)."""
        e = os.environ if environ is None else environ
        url, token, job = e.get(c.API, ""), e.get(c.JOB_TOKEN, ""), e.get(c.JOB_NAME, "")
        if not (url and token and job):
            return None
        return cls(url.rstrip("/"), token, job, e.get(c.API_CA, ""), timeout)

    def _call(self, method: str, suffix: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        path = f"/api/v1/jobs/{urllib.parse.quote(self.job, safe='')}/adaptive{suffix}"
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with self._opener.open(req, timeout=self.timeout) as r:
                answer: dict[str, Any] = json.loads(r.read() or b"{}")
                return answer
        except urllib.error.HTTPError as exc:
            try:
                err = json.loads(exc.read() or b"{}").get("error", {})
            except (ValueError, AttributeError, OSError):
                err = {}
            raise AdaptiveApiError(
                str(err.get("message", f"HTTP {exc.code}")), str(err.get("code", "")), exc.code
            ) from None
        except (OSError, ValueError) as exc:  # refused, timed out, reset, TLS, not JSON
            raise AdaptiveApiError(f"{self.url} unreachable: {exc}") from None

    def state(self) -> dict[str, Any]:
        """``GET …/adaptive``: the current assignment and what the server knows (AdaptiveState)."""
        return self._call("GET", "")

    def report(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """``POST …/adaptive/report``; answers the current AdaptiveState."""
        return self._call("POST", "/report", body)


def read_assignment(
    api: JobApi | None, environ: Mapping[str, str] | None = None, default_batch: int = 32, lr_rule: str = ""
) -> Assignment:
    """The assignment now: the API's when it answers, else what the worker was started with."""
    fallback = Assignment.from_env(
        os.environ if environ is None else environ, default_batch, lr_rule or "adascale"
    )
    if api is None:
        return fallback
    try:
        return Assignment.from_state(api.state())
    except AdaptiveApiError as exc:
        if exc.code == "not_adaptive":  # a fixed-batch job: nothing to ask the server, ever
            return Assignment(fallback.init, fallback.init, fallback.init, fallback.init, fallback.lr_rule,
                              source=fallback.source)  # fmt: skip
        _log(f"cannot read the assigned batch ({exc}): {fallback.batch_size} from the {fallback.source}")
    except (KeyError, TypeError, ValueError) as exc:
        _log(f"unexpected answer for the assigned batch ({exc!r}): using {fallback.batch_size}")
    return fallback


# --- the split and the learning rate --------------------------------------------------------------


@dataclass(frozen=True)
class BatchSplit:
    """How a global batch runs on ``replicas``: each takes ``accum_steps`` micro-batches of ``micro``."""

    replicas: int
    micro: int
    accum_steps: int

    @property
    def local(self) -> int:
        """Samples per replica per optimizer step."""
        return self.micro * self.accum_steps

    @property
    def batch(self) -> int:
        """The global batch actually trained at (the assigned one, rounded to what splits evenly)."""
        return self.local * self.replicas


def plan(batch: int, replicas: int, max_local: int | None = None) -> BatchSplit:
    """Local batch ``≈ batch / replicas``; above ``max_local`` it is accumulated over micro-batches of
    at most ``max_local``."""
    if batch < 1 or replicas < 1:
        raise ValueError(f"need batch >= 1 and replicas >= 1, got {batch} and {replicas}")
    if max_local is not None and max_local < 1:
        raise ValueError(f"the max local batch must be >= 1, got {max_local}")
    local = max(1, round(batch / replicas))
    steps = 1 if max_local is None else math.ceil(local / max_local)
    return BatchSplit(replicas, max(1, round(local / steps)), steps)


def lr_gain(rule: str, scale: float, grad_sqr: float | None = None, grad_var: float | None = None) -> float:
    """The factor on the learning rate at ``scale = batch / initial batch``.

    - ``adascale`` (default): ``r = (var + sqr) / (var / S + sqr)`` (Johnson et al. 2020, AdaScale SGD),
      ``var`` and ``sqr`` measured at the initial batch. ``r`` goes from 1 (no gradient noise: a bigger
      batch gives no better step) to ``S`` (all noise: as good as ``S`` steps), so it adapts to where
      the training is; 1 while nothing is measured yet.
    - ``linear``: ``S`` (Goyal et al. 2017); right while the noise dominates, too large late in training.
    - ``sqrt``: ``√S`` (keeps the update's variance; Krizhevsky 2014), for adaptive optimisers.
    - ``none``: 1 (the program scales the LR itself, or the batch is fixed).
    """
    if rule == "linear":
        return scale
    if rule == "sqrt":
        return math.sqrt(scale)
    if rule == "none" or grad_sqr is None or grad_var is None:
        return 1.0
    sqr, var = max(grad_sqr, 0.0), max(grad_var, 0.0)
    if var + sqr <= 0.0:
        return 1.0
    return (var + sqr) / (var / scale + sqr)


# --- a new batch during the training: agreed by every replica, applied at a step boundary ----------


def proposed_batch(state: Mapping[str, Any] | None, replicas: int) -> int:
    """The global batch an AdaptiveState (``GET …/adaptive``) assigns to ``replicas`` trainers; 0:
    none (no answer yet, one without a usable ``batch_size``, or a batch assigned for another trainer
    count: a membership change is coming, and the worker group's restart reads it then)."""
    try:
        batch = int((state or {}).get("batch_size") or 0)
        trainers = int((state or {}).get("trainers") or 0)
    except (TypeError, ValueError):
        return 0
    return max(batch, 0) if trainers in (0, replicas) else 0


def sync_vector(window: tuple[float, float, float], proposal: int, rank: int) -> list[float]:
    """What one replica contributes to the every-``sync_every``-steps all-reduce (a sum): its noise
    window (``NoiseEstimator.window``) and, from rank 0 only, the batch it read from the server
    (every other rank sends 0, so the sum is rank 0's proposal on every replica)."""
    return [*window, float(proposal) if rank == 0 else 0.0]


def agreed(summed: Sequence[float], world: int) -> tuple[tuple[float, float, float], int]:
    """From the all-reduced :func:`sync_vector`: the replicas' mean window and rank 0's proposal (the
    same on every replica, since every replica holds the same sum)."""
    sqr, var, steps, proposal = (float(v) for v in summed)
    return (sqr / world, var / world, steps / world), max(round(proposal), 0)


def rebatch(current: Assignment, proposal: int) -> Assignment | None:
    """The assignment to switch to for an agreed ``proposal`` (None: nothing to change: a fixed batch,
    no proposal, or the batch trained at now). A proposal outside the job's bounds is clamped."""
    if not current.adaptive or proposal <= 0:
        return None
    batch = min(max(proposal, current.lo), current.hi)
    if batch == current.batch_size:
        return None
    return dataclasses.replace(current, batch_size=batch, source="api")


class LiveBatchSampler:
    """A DataLoader ``batch_sampler`` whose batch size is read at every batch (``size()``), so a new
    micro-batch applies from the next batch on, mid-epoch, without a new loader or a lost position.
    Every replica reads the same size at the same step (``AdaptiveDDP`` switches them together),
    and a ``DistributedSampler`` gives each the same number of indices, so their steps stay paired."""

    def __init__(self, sampler: Iterable[int], size: Callable[[], int], drop_last: bool = False) -> None:
        self.sampler, self.size, self.drop_last = sampler, size, drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) >= max(self.size(), 1):
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        """Batches in a pass at the size now (an estimate once the size changes during the pass)."""
        rows, size = len(self.sampler) if isinstance(self.sampler, Sized) else 0, max(self.size(), 1)
        return rows // size if self.drop_last else math.ceil(rows / size)


# --- the gradient noise -------------------------------------------------------------------------


def two_batch_estimate(small_sqr: float, small: float, big_sqr: float, big: float) -> tuple[float, float]:
    """``(|G|², tr(Σ))`` from ``|g|²`` of one gradient averaged over ``small`` samples and of one over
    ``big > small`` samples (unbiased; either may come out negative from one measurement)."""
    if not 0 < small < big:
        raise ValueError(f"need 0 < small < big, got {small} and {big}")
    sqr = (big * big_sqr - small * small_sqr) / (big - small)
    var = (small_sqr - big_sqr) / (1.0 / small - 1.0 / big)
    return sqr, var


#: the largest noise scale an estimate gives, in initial batches (see ``NoiseEstimator.grad_sqr``)
MAX_NOISE = 1000


@dataclass
class NoiseEstimator:
    """``|G|²`` and ``tr(Σ)`` from per-step measurements: summed over a window (so that replicas can
    average theirs in one all-reduce), then smoothed with a bias-corrected EMA of ``smoothing`` per step."""

    init: int
    smoothing: float = 0.99
    _window: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # sqr, var, steps
    _ema: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # sqr, var, weight

    def measure(self, small_sqr: float, small: float, big_sqr: float, big: float) -> None:
        """One step's squared gradient norms at two batch sizes (``small < big``)."""
        sqr, var = two_batch_estimate(small_sqr, small, big_sqr, big)
        if math.isfinite(sqr) and math.isfinite(var):
            self._window[0] += sqr
            self._window[1] += var
            self._window[2] += 1

    def window(self) -> tuple[float, float, float]:
        """``(Σ sqr, Σ var, steps)`` measured since the last :meth:`update`."""
        return self._window[0], self._window[1], self._window[2]

    def update(self, sqr_sum: float, var_sum: float, steps: float) -> None:
        """Fold a window (this replica's or the replicas' mean) into the EMA and start a new window."""
        self._window = [0.0, 0.0, 0.0]
        if steps <= 0 or not (math.isfinite(sqr_sum) and math.isfinite(var_sum)):
            return
        theta = self.smoothing**steps
        for i, value in enumerate((sqr_sum / steps, var_sum / steps, 1.0)):
            self._ema[i] = theta * self._ema[i] + (1 - theta) * value

    @property
    def measured(self) -> bool:
        return self._ema[2] > 0

    @property
    def grad_sqr(self) -> float | None:
        """``|G|²``, None before the first window. Late in training ``|G|²`` sinks into the noise and
        its estimate to 0 or below: it is then taken as ``tr(Σ) / (MAX_NOISE x init)``, a noise scale
        of ``MAX_NOISE`` initial batches ("mostly noise"), not an unknown or infinite one."""
        if not self.measured:
            return None
        var = max(self._ema[1] / self._ema[2], 0.0)
        return max(self._ema[0] / self._ema[2], var / (MAX_NOISE * self.init))

    @property
    def grad_var(self) -> float | None:
        """``tr(Σ) / init``: the variance of a gradient at the initial batch (>= 0), None before any."""
        return max(self._ema[1] / self._ema[2], 0.0) / self.init if self.measured else None

    @property
    def noise_scale(self) -> float | None:
        """``B_noise = tr(Σ) / |G|²`` in samples; None before any window or with ``|G|² = 0``."""
        sqr, var = self.grad_sqr, self.grad_var
        return self.init * var / sqr if sqr and var is not None else None

    def state_dict(self) -> dict[str, float]:
        """The EMA (``|G|²``, ``tr(Σ)``, weight: none depends on the batch) to keep in a checkpoint."""
        return {"sqr": self._ema[0], "var": self._ema[1], "weight": self._ema[2]}

    def load_state_dict(self, state: Mapping[str, float]) -> None:
        """Resume after a restart (the window measured since the last update is dropped)."""
        self._ema = [float(state["sqr"]), float(state["var"]), float(state["weight"])]
        self._window = [0.0, 0.0, 0.0]


# --- reports to the server ------------------------------------------------------------------------


class Reporter:
    """Sends rank 0's reports at most every ``every`` seconds (the first ``first_after`` seconds after
    start), from a background thread: the training loop never waits for the server. A failure is
    logged once (and the recovery once); the next report is simply the next one due."""

    def __init__(
        self,
        send: Callable[[dict[str, Any]], Mapping[str, Any]],
        every: float = 10.0,
        first_after: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        what: str = "reporting to the server",
    ) -> None:
        self._send, self.every, self._clock, self._what = send, every, clock, what
        self._next = clock() + first_after
        self._pending: dict[str, Any] | None = None
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._closed = self._busy = self._failing = False
        #: the server's last answer (AdaptiveState), None before one
        self.answer: Mapping[str, Any] | None = None
        self.sent = self.failed = 0

    def due(self) -> bool:
        return self._clock() >= self._next

    def offer(self, build: Callable[[], dict[str, Any] | None]) -> bool:
        """If a report is due, ``build()`` it (None: nothing to say yet) and queue it; True if queued.
        A report still waiting for an earlier one to be sent is replaced by the newer."""
        if self._closed or not self.due():
            return False
        body = build()
        if body is None:
            return False
        self._next = self._clock() + self.every
        with self._cond:
            self._pending = body
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="adaptive-reporter", daemon=True)
                self._thread.start()
            self._cond.notify()
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                if self._pending is None:
                    return
                body, self._pending, self._busy = self._pending, None, True
            self._deliver(body)
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def _deliver(self, body: dict[str, Any]) -> None:
        try:
            self.answer = self._send(body)
        except Exception as exc:  # never let a report fail the training
            self.failed += 1
            if not self._failing:
                _log(f"{self._what} failed ({exc}); training goes on, it is retried")
            self._failing = True
            return
        self.sent += 1
        if self._failing:
            _log(f"{self._what} works again")
        self._failing = False

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait (bounded) until nothing is queued or being sent; True if so."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._pending is not None or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def close(self, timeout: float = 2.0) -> None:
        """Send what is queued (bounded by ``timeout``), then stop the thread."""
        self.flush(timeout)
        with self._cond:
            self._closed = True
            self._cond.notify_all()
