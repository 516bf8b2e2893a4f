"""The import budget of a CLI command: what ``paddlecloud pfs ...`` loads before it does anything.

Each check runs in a fresh interpreter (``sys.modules`` of this test process holds everything) and
imports what the ``paddlecloud`` script imports for a ``pfs`` command: ``cli.main`` and ``cli.pfs``.
No timing is asserted: the modules a command does not need are named, so a new top-level import of
the job models, Rich or httpx's own command line in that path fails here.
"""

from __future__ import annotations

import json
import subprocess
import sys

__all__: list[str] = []

#: modules the `pfs` path must not load: the job wire models and the SDK class that imports them,
#: Rich (drawn only for a progress bar, not with -q) and httpx's command line (Rich and pygments)
NOT_FOR_PFS = [
    "paddlecloud.api.models",
    "paddlecloud.client.client",
    "rich",
    "rich.table",
    "rich.console",
    "pygments",
]


def loaded(code: str) -> dict[str, bool]:
    """Run ``code`` in a fresh interpreter; which of NOT_FOR_PFS it left imported (a ``None`` entry,
    a module refused on purpose, counts as not imported)."""
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps({{m: sys.modules.get(m) is not None for m in {NOT_FOR_PFS!r}}}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    result: dict[str, bool] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_the_pfs_command_path_imports_no_job_models_and_no_rich() -> None:
    got = loaded("import paddlecloud.cli.main, paddlecloud.cli.pfs")
    assert [m for m, present in got.items() if present] == []


#: a session made after this counts the CA bundles its SSL contexts load (httpx's default: certifi's)
COUNT_CA_LOADS = """
import ssl
CA_LOADS = []
_load = ssl.SSLContext.load_verify_locations
def _counting(self, *a, **kw):
    CA_LOADS.append(a or kw)
    return _load(self, *a, **kw)
ssl.SSLContext.load_verify_locations = _counting
import paddlecloud.cli.main
from paddlecloud.client.pfs import Pfs
"""


def ca_loads(endpoint: str) -> int:
    probe = (
        COUNT_CA_LOADS
        + f"Pfs.connect(endpoint={endpoint!r}, token='t').session.close()\nprint(len(CA_LOADS))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    return int(out.stdout.strip().splitlines()[-1])


def test_a_session_to_a_plain_http_endpoint_loads_no_ca_bundle() -> None:
    assert ca_loads("http://127.0.0.1:9") == 0
    assert ca_loads("https://127.0.0.1:9") >= 1  # https keeps httpx's verifying default: the check can fail


def test_the_probe_sees_what_the_full_sdk_imports() -> None:
    """The probe can fail: ``Client`` (every job model) and a Rich table are seen when imported."""
    got = loaded("import paddlecloud.cli.main\nfrom paddlecloud.client import Client\nimport rich.table")
    assert got["paddlecloud.api.models"] and got["paddlecloud.client.client"] and got["rich.table"]
