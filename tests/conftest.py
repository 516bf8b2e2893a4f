"""Test-suite-wide hooks: how `make test` spreads the suite over two pytest-xdist workers.

`make test` runs ``pytest -n 2 --dist loadgroup``. The unit, fuzz and conformance tests that need no
shared machine state are spread over both workers; the suites that start servers, clusters and
jobs run one test at a time inside their group, as they always did:

- ``system``: tests/e2e and tests/kube (real servers and jobs; timing-sensitive
  chaos and watch tests; one PostgreSQL cluster per session);
- ``slurm``: tests/slurm and tests/conformance (one private Slurm cluster of
  scripts/ensure-slurm.sh, which two workers must not start or stop at the same time).

Without xdist (``pytest tests``) the marks change nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

__all__: list[str] = []

_TESTS = Path(__file__).resolve().parent
_GROUPS = {
    "e2e": "system",
    "kube": "system",
    "slurm": "slurm",
    "conformance": "slurm",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        try:
            top = Path(str(item.path)).resolve().relative_to(_TESTS).parts[0]
        except ValueError:
            continue
        group = _GROUPS.get(top)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
