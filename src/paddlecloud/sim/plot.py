"""``paddlecloud sim --plot``: utilisation and queue length over time, one line per policy, as a PNG.

Report.policy_series() (one :class:`~paddlecloud.sim.series.Series` per policy, workloads averaged)
    ─▶ :func:`plot_series` ─▶ two panels sharing the time axis (hours since the first submission):
       utilisation in % of the cluster (allocated solid, useful dashed) and jobs waiting.

matplotlib is an optional extra (``pip install 'paddlecloud[plot]'``). It is imported only here,
inside the function, and drawn with the Agg canvas directly (no pyplot, no display, no global
backend switch); without it :class:`PlotUnavailable` says what to install.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from paddlecloud.sim.series import Series

__all__ = ["INSTALL_HINT", "PlotUnavailable", "plot_series"]

INSTALL_HINT = "--plot needs matplotlib, an optional extra: pip install 'paddlecloud[plot]'"


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def plot_series(
    series: Mapping[str, Series], capacity: float, path: str | Path, *, title: str = "", unit: str = "GPU"
) -> None:
    """Write a PNG of ``series`` (policy -> series) to ``path``; utilisation is relative to ``capacity``."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise PlotUnavailable(INSTALL_HINT) from exc
    fig = Figure(figsize=(11, 6.5), dpi=110, layout="constrained")
    FigureCanvasAgg(fig)
    util, queue = fig.subplots(2, 1, sharex=True)
    cap = capacity or 1.0
    for k, (policy, s) in enumerate(series.items()):
        color = f"C{k % 10}"
        hours = [t / 3600.0 for t in s.t]
        util.step(hours, [100.0 * a / cap for a in s.allocated], where="post", color=color,
                  label=f"{policy} allocated")  # fmt: skip
        util.step(hours, [100.0 * u / cap for u in s.useful], where="post", color=color, linestyle="--",
                  alpha=0.8, label=f"{policy} useful")  # fmt: skip
        queue.step(hours, s.queued, where="post", color=color, label=policy)
    util.set_ylabel(f"{unit} utilisation (%)")
    util.set_ylim(0, 105)
    util.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    util.grid(alpha=0.3)
    queue.set_ylabel("jobs waiting")
    queue.set_xlabel("hours since the first submission")
    queue.set_ylim(bottom=0)
    queue.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    queue.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.savefig(path, format="png")
