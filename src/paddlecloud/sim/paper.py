"""The Pollux paper's simulator results, as reference numbers for ours.

``pollux/results-jobload/<policy>-<load>/summary.json`` (policies ``pollux``, ``tiresias``
(+TunedJobs), ``optimus`` (+Oracle+TunedJobs); relative job loads 0.5, 1.0, 1.5, 2.0) holds exactly
three keys:

``jcts``  ``{workload: {job name: JCT}}``: completion minus submission time, whole seconds, for all
          jobs of each of the 8 workloads (80 / 160 / 240 / 320 jobs per workload at load
          0.5 / 1.0 / 1.5 / 2.0). Job names are those of ``workloads*/workload-<k>.csv``; the
          application is the name's prefix (``cifar10-0``).
``avgs``  ``{workload: mean JCT over its jobs}`` (the "avg JCT" of a workload).
``mean``  the mean of ``avgs`` over the 8 workloads: the headline "mean avg JCT".

:class:`PaperResult` exposes these as read-only mappings plus a few derived views (per-app
averages, percentiles). The file's ``avgs`` and ``mean`` are kept as written; :meth:`PaperResult.check`
confirms that they agree with ``jcts``. At load 1.0 the means are pollux 2,751.13 s, tiresias
4,038.18 s and optimus 5,681.93 s.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

__all__ = ["LOADS", "POLICIES", "PaperResult", "load_result", "load_results"]

POLICIES: tuple[str, ...] = ("pollux", "tiresias", "optimus")
LOADS: tuple[float, ...] = (0.5, 1.0, 1.5, 2.0)
_KEYS = frozenset({"jcts", "avgs", "mean"})


@dataclass(frozen=True)
class PaperResult:
    """One ``summary.json``: a policy at a job load, over the 8 workloads."""

    policy: str
    load: float
    #: workload -> job name -> JCT (s)
    jcts: Mapping[str, Mapping[str, int]]
    #: workload -> average JCT (s), as written in the file
    avg_jct: Mapping[str, float]
    #: mean over workloads of ``avg_jct``, as written in the file
    mean_avg_jct: float

    @property
    def workloads(self) -> tuple[str, ...]:
        """Workload names, ``workload-1`` .. ``workload-8`` in numeric order."""
        return tuple(sorted(self.jcts, key=_workload_order))

    def job_count(self, workload: str) -> int:
        return len(self.jcts[workload])

    def all_jcts(self) -> list[int]:
        """Every job's JCT over all workloads."""
        return [v for w in self.workloads for v in self.jcts[w].values()]

    def avg_jct_by_app(self, workload: str | None = None) -> dict[str, float]:
        """Mean JCT per application (name prefix), in one workload or pooled over all."""
        sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
        names = [workload] if workload is not None else list(self.workloads)
        for w in names:
            for job, jct in self.jcts[w].items():
                acc = sums[job.rsplit("-", 1)[0]]
                acc[0] += jct
                acc[1] += 1
        return {app: s / n for app, (s, n) in sorted(sums.items())}

    def percentile(self, q: float, workload: str | None = None) -> float:
        """The ``q``-th percentile (0-100, nearest rank) of JCTs in one workload or all."""
        if not 0 <= q <= 100:
            raise ValueError(f"q must be in [0, 100], got {q}")
        values = sorted(self.jcts[workload].values() if workload is not None else self.all_jcts())
        if not values:
            raise ValueError("no JCTs")
        rank = max(1, math.ceil(q / 100 * len(values)))
        return float(values[rank - 1])

    def check(self, tolerance: float = 1e-6) -> None:
        """Raise ValueError unless ``avg_jct`` and ``mean_avg_jct`` agree with ``jcts``."""
        for w in self.workloads:
            values = self.jcts[w].values()
            avg = sum(values) / len(values)
            if abs(avg - self.avg_jct[w]) > tolerance:
                raise ValueError(f"{self.policy}-{self.load}: {w} avg {self.avg_jct[w]} != {avg}")
        mean = sum(self.avg_jct.values()) / len(self.avg_jct)
        if abs(mean - self.mean_avg_jct) > tolerance:
            raise ValueError(f"{self.policy}-{self.load}: mean {self.mean_avg_jct} != {mean}")


def _workload_order(name: str) -> tuple[int, str]:
    tail = name.rsplit("-", 1)[-1]
    return (int(tail), name) if tail.isdigit() else (1 << 30, name)


def load_result(results_dir: str | Path, policy: str, load: float) -> PaperResult:
    """Read ``<results_dir>/<policy>-<load>/summary.json`` (load written with one decimal: ``1.0``)."""
    path = Path(results_dir) / f"{policy}-{load:.1f}" / "summary.json"
    with path.open() as f:
        raw = json.load(f)
    if not isinstance(raw, dict) or set(raw) != _KEYS:
        keys = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
        raise ValueError(f"{path}: expected keys {sorted(_KEYS)}, got {keys}")
    jcts = {
        str(w): MappingProxyType({str(job): int(v) for job, v in per_job.items()})
        for w, per_job in raw["jcts"].items()
    }
    avgs = {str(w): float(v) for w, v in raw["avgs"].items()}
    if set(avgs) != set(jcts):
        raise ValueError(f"{path}: workloads in avgs {sorted(avgs)} differ from jcts {sorted(jcts)}")
    return PaperResult(
        policy=policy,
        load=load,
        jcts=MappingProxyType(jcts),
        avg_jct=MappingProxyType(avgs),
        mean_avg_jct=float(raw["mean"]),
    )


def load_results(
    results_dir: str | Path,
    policies: Iterable[str] = POLICIES,
    loads: Iterable[float] = LOADS,
) -> dict[tuple[str, float], PaperResult]:
    """Every ``(policy, load)`` result under ``results_dir``."""
    load_list = tuple(loads)
    return {(p, x): load_result(results_dir, p, x) for p in policies for x in load_list}
