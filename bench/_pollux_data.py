"""Where the Pollux workloads and the paper's results are, for the bench scripts.

Loads 0.5, 1.0 and 1.5 (and the paper's results at every load) are read from the shared data
folder beside the checkout (``../shared/data/pollux``, see its README). The paper's load-2.0 set
(320 jobs per workload) is not in the shared folder; it is kept in ``bench/data/pollux-workloads-2.0``
(public data of the same artifact; ``bench/data/README.md`` says where it comes from and how it was
checked against the shared data).

    from _pollux_data import DATA, LOADS, workload_files
    files = workload_files(1.5)            # sorted paths of workload-1..8.csv
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DATA", "LOADS", "TRACES", "workload_files"]

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "pollux"
#: the six applications' measured profiles (``sim --traces``: the 2.0 set is not beside them)
TRACES = str(DATA / "traces")
_HERE = Path(__file__).resolve().parent / "data"
_FOLDERS = {
    0.5: DATA / "workloads-0.5",
    1.0: DATA / "workloads",
    1.5: DATA / "workloads-1.5",
    2.0: _HERE / "pollux-workloads-2.0",
}
LOADS = tuple(sorted(_FOLDERS))


def workload_files(load: float, numbers: list[int] | None = None) -> list[Path]:
    """The workload CSVs of one load (all 8, or ``numbers``), in workload order."""
    folder = _FOLDERS[load]
    if numbers is None:
        return sorted(folder.glob("workload-*.csv"), key=lambda p: int(p.stem.split("-")[1]))
    return [folder / f"workload-{k}.csv" for k in numbers]
