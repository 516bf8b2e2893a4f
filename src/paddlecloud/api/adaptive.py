"""Wire models of adaptive batch size (issue 14): the job spec's ``batch``, a job's reports, its state.

    submit ── JobSpec.batch = BatchSpec(size, adaptive=BatchRange(min, max), lr_rule) ──▶ stored spec
    trainer ── POST /jobs/{name}/adaptive/report  AdaptiveReport ──▶ AdaptiveState (the assignment now)
    trainer, owner ── GET /jobs/{name}/adaptive ──▶ AdaptiveState;  describe: JobDetail.adaptive

``BatchSpec.size`` is the global batch the job starts with (``M0``, the unit of its progress); with
``adaptive`` the scheduler may give it any global batch in ``[min, max]`` as it changes its trainers,
and the job's runtime scales its learning rate by ``lr_rule``. A spec without ``adaptive`` keeps its
batch (the scheduler never changes it). The runtime (``paddlecloud.runtime``, standard library only)
reads and writes these as plain JSON: the field names are the contract.

``AdaptiveReport.grad_sqr`` / ``grad_var`` are ``|G|^2`` and ``tr(Sigma)`` at the job's initial batch
(the Pollux traces' meaning), so the gradient noise scale is ``init * grad_var / grad_sqr`` samples.
Numbers must be finite: a NaN or an infinity is refused (422).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from paddlecloud.api.body import Body

__all__ = [
    "MAX_BATCH",
    "MAX_REPLICAS",
    "AdaptiveReport",
    "AdaptiveState",
    "BatchRange",
    "BatchSpec",
    "LrRule",
]

#: the largest global batch a spec may name
MAX_BATCH = 2**24
#: the most replicas a report may describe
MAX_REPLICAS = 4096


class LrRule(StrEnum):
    """How the job's runtime scales its learning rate when its global batch changes from ``M0`` to ``M``.

    ``adascale``: AdaScale's gain ``r = (B_noise + M0) S / (B_noise + M)`` with ``S = M / M0`` (no
    tuning; the same accuracy per example processed), the default. ``linear``: ``lr x S`` (Goyal et
    al.). ``sqrt``: ``lr x sqrt(S)`` (Krizhevsky; Hoffer et al.). ``none``: the job scales it itself.
    """

    ADASCALE = "adascale"
    LINEAR = "linear"
    SQRT = "sqrt"
    NONE = "none"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class BatchRange(_Strict):
    """The global batches an adaptive job may be given (``submit --adaptive-batch-size MIN:MAX``)."""

    min: int = Field(ge=1, le=MAX_BATCH, strict=True)
    max: int = Field(ge=1, le=MAX_BATCH, strict=True)

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.min > self.max:
            raise ValueError(f"adaptive batch bounds need min <= max, got {self.min}:{self.max}")
        return self


class BatchSpec(_Strict):
    """A job's global batch size; with ``adaptive``, the scheduler may change it within the bounds."""

    size: int = Field(
        ge=1, le=MAX_BATCH, strict=True, description="the global batch the job starts with (--batch-size)"
    )
    adaptive: BatchRange | None = Field(
        None, description="bounds the scheduler may move the global batch within (None: a fixed batch)"
    )
    lr_rule: LrRule = Field(
        LrRule.ADASCALE,
        description="how the runtime scales the learning rate with the batch: adascale, linear, sqrt, none",
    )

    @model_validator(mode="after")
    def _inside(self) -> Self:
        a = self.adaptive
        if a is not None and not a.min <= self.size <= a.max:
            raise ValueError(
                f"the batch size {self.size} must lie within the adaptive bounds {a.min}:{a.max} "
                "(the job starts at its batch size)"
            )
        return self


class AdaptiveReport(Body):
    """What an adaptive job's trainer reports (at most one report per job is kept every 5 s)."""

    replicas: int = Field(ge=1, le=MAX_REPLICAS, strict=True, description="data-parallel replicas now")
    local_bsz: float = Field(
        gt=0, le=MAX_BATCH, allow_inf_nan=False, strict=True, description="samples per replica per step"
    )
    step_time_s: float = Field(
        gt=0, le=86_400, allow_inf_nan=False, strict=True, description="seconds per optimizer step"
    )
    grad_sqr: float | None = Field(
        None,
        ge=0,
        le=1e30,
        allow_inf_nan=False,
        strict=True,
        description="|G|^2 at the job's initial batch",
    )
    grad_var: float | None = Field(
        None,
        ge=0,
        le=1e30,
        allow_inf_nan=False,
        strict=True,
        description="tr(Sigma) at the job's initial batch",
    )
    lr_gain: float | None = Field(
        None, ge=1, le=1e6, allow_inf_nan=False, strict=True, description="the LR gain applied now"
    )
    batch_size: int = Field(
        ge=1, le=MAX_BATCH, strict=True, description="the global batch the job was training at"
    )


class AdaptiveState(BaseModel):
    """An adaptive job's batch settings and what the server knows of it (``GET .../adaptive``)."""

    model_config = ConfigDict(defer_build=True)

    batch_size: int = Field(description="the global batch assigned now")
    init: int = Field(description="the global batch the job started with (M0)")
    min: int
    max: int
    lr_rule: LrRule
    trainers: int = Field(0, description="the trainers the assignment was made for (0: none yet)")
    noise_scale: float | None = Field(None, description="gradient noise scale in samples (smoothed)")
    lr_gain: float | None = Field(None, description="the LR gain the job last reported")
    step_time_s: float | None = Field(None, description="the step time the job last reported")
    reports: int = Field(0, description="reports stored so far")
