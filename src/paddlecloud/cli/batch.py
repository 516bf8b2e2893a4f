"""Batch size commands: ``submit``'s ``--batch-size`` / ``--adaptive-batch-size`` / ``--lr-rule`` and
the lines ``describe`` prints for them.

The options are read into the spec's ``batch`` field and checked with the wire model
(``api.adaptive.BatchSpec``) before anything is uploaded, so a bad value fails at once with the
rule it breaks; the server checks the same rules again. No decisions here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click
from pydantic import ValidationError

from paddlecloud.api.adaptive import AdaptiveState, BatchSpec, LrRule

__all__ = ["batch_lines", "batch_options", "batch_spec"]

F = TypeVar("F", bound=Callable[..., Any])

_RULES = [str(r) for r in LrRule]

_OPTIONS = [
    click.option("--batch-size", type=int, metavar="N",
                 help="the job's global batch size (it starts at it; sets PADDLECLOUD_BATCH_SIZE)"),
    click.option("--adaptive-batch-size", "adaptive_batch", metavar="MIN:MAX",
                 help="opt in: the scheduler may change the global batch within MIN..MAX as it changes "
                 "the trainers, for the best goodput (needs --batch-size)"),
    click.option("--lr-rule", type=click.Choice(_RULES), metavar="RULE",
                 help="how the runtime scales the learning rate with the batch: adascale (default), "
                 "linear, sqrt, none (needs --adaptive-batch-size)"),
]  # fmt: skip


def batch_options(fn: F) -> F:
    """``submit``'s batch options (read back with :func:`batch_spec`)."""
    for option in reversed(_OPTIONS):
        fn = option(fn)
    return fn


def _bounds(text: str) -> dict[str, int]:
    lo, sep, hi = text.partition(":")
    if not sep or not lo.strip().isdigit() or not hi.strip().isdigit():
        raise click.BadParameter(
            f"{text!r} is not MIN:MAX (two whole numbers, e.g. 32:1024)", param_hint="--adaptive-batch-size"
        )
    return {"min": int(lo), "max": int(hi)}


def batch_spec(opts: dict[str, Any]) -> dict[str, Any] | None:
    """The JobSpec ``batch`` field from the options (removed from ``opts``); None: not given."""
    size, adaptive, rule = opts.pop("batch_size"), opts.pop("adaptive_batch"), opts.pop("lr_rule")
    if size is None:
        if adaptive is not None:
            raise click.UsageError("--adaptive-batch-size needs --batch-size N (the batch the job starts at)")
        if rule is not None:
            raise click.UsageError(
                "--lr-rule needs --adaptive-batch-size MIN:MAX (a fixed batch needs no rule)"
            )
        return None
    if rule is not None and adaptive is None:
        raise click.UsageError("--lr-rule needs --adaptive-batch-size MIN:MAX (a fixed batch needs no rule)")
    spec: dict[str, Any] = {"size": size}
    if adaptive is not None:
        spec["adaptive"] = _bounds(adaptive)
    if rule is not None:
        spec["lr_rule"] = rule
    try:
        BatchSpec.model_validate(spec)
    except ValidationError as exc:
        first = exc.errors()[0]
        hint = "--batch-size" if first.get("loc") == ("size",) else "--adaptive-batch-size"
        msg = str(first.get("msg", "invalid")).removeprefix("Value error, ")
        raise click.BadParameter(msg, param_hint=hint) from None
    return spec


def batch_lines(spec: BatchSpec | None, state: AdaptiveState | None) -> list[tuple[str, str]]:
    """``describe``'s (label, text) lines: the settings and, for an adaptive job, what it runs at now."""
    if spec is None:
        return []
    if spec.adaptive is None:
        return [("Batch", f"{spec.size} (fixed)")]
    lines = [
        ("Batch", f"{spec.size}, adaptive {spec.adaptive.min}..{spec.adaptive.max}, lr rule {spec.lr_rule}")
    ]
    if state is not None:
        on = f" on {state.trainers} trainers" if state.trainers else " (not started yet)"
        noise = f"{state.noise_scale:,.0f}" if state.noise_scale is not None else "-"
        gain = f"{state.lr_gain:.3g}" if state.lr_gain is not None else "-"
        step = f"{state.step_time_s:.3g} s" if state.step_time_s is not None else "-"
        now = f"global batch {state.batch_size}{on}; noise scale {noise}, lr gain {gain}, "
        lines.append(("Adaptive", f"{now}step time {step} ({state.reports} reports)"))
    return lines
