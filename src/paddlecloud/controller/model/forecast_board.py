"""The latest start-time forecast, as the views read it (``JobView.estimate``).

    loop.forecasts.Forecaster ──publish(Forecast)──▶ ForecastBoard.latest, and the pseudo-table
    ``forecasts``' change counter bumped (the job-list cache drops what it kept)
    views ──view("user/name")──▶ EstimateView | None

It lives in the model because both sides read it: the loop writes it, the job service and the
views read it, and neither may import the other.
"""

from __future__ import annotations

from paddlecloud.api.models import EstimateView
from paddlecloud.controller.model.views import ts
from paddlecloud.scheduler.forecast import Forecast
from paddlecloud.store import ChangeCounters

__all__ = ["FORECAST_TABLE", "ForecastBoard"]

#: the pseudo-table whose change counter moves when a new forecast is published
FORECAST_TABLE = "forecasts"


def _ts(t: float | None) -> str | None:
    v = ts(t)
    return None if v is None else v.isoformat()


class ForecastBoard:
    """The latest forecast, read by the views; published by the :class:`Forecaster`."""

    def __init__(self, changes: ChangeCounters) -> None:
        self._changes = changes
        self.latest: Forecast | None = None

    def publish(self, fc: Forecast) -> None:
        self.latest = fc
        self._changes.bump({FORECAST_TABLE})

    def view(self, key: str) -> EstimateView | None:
        """The estimate of job ``key`` ("user/name"), if the latest forecast saw it."""
        fc = self.latest
        est = fc.estimates.get(key) if fc is not None else None
        if fc is None or est is None:
            return None
        return EstimateView.model_validate(
            {
                "start": _ts(est.start),
                "end": _ts(est.end),
                "start_basis": est.start_basis,
                "end_basis": est.end_basis,
                "horizon": _ts(fc.horizon),
                "made_at": _ts(fc.made_at),
            }
        )
