"""schemathesis over the whole OpenAPI document, as a normal user and as an admin: no input is ever
answered with a server error.

Every operation of ``/api/v1/openapi.json`` gets generated requests (valid and invalid bodies,
parameters and paths) through the ASGI transport against a real platform: its database, local
backend and file store on a temporary data dir (the reconcile loop is not running, so submitted
jobs stay queued and nothing is started). The check is the issue's: 0 answers >= 500. Bounded by
``PADDLECLOUD_FUZZ_EXAMPLES`` examples per operation and identity (default 25), a few minutes in all.
At the end the number of operations and cases run is printed (``-s`` shows it).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from paddlecloud.api import API_PREFIX
from paddlecloud.backends.local import LocalSettings, NodeShape
from paddlecloud.controller import Platform, PlatformConfig
from paddlecloud.server import create_app

pytestmark = [
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
]

EXAMPLES = int(os.environ.get("PADDLECLOUD_FUZZ_EXAMPLES", "25"))
TOKENS: dict[str, str] = {}
SEEN: dict[str, set[str]] = {"operations": set()}
CASES = {"run": 0, "errors": 0}


def _platform() -> Platform:
    """One platform for the module, on a fresh data dir (schemathesis needs the app at import)."""
    data = Path(tempfile.mkdtemp(prefix="paddlecloud-fuzz-")) / "data"
    p = Platform.open(
        PlatformConfig(
            data_dir=data,
            backend_settings=LocalSettings(nodes=NodeShape(count=1, cpu_m=4000, memory=8 * 2**30)),
        )
    )
    TOKENS["admin"] = p.ensure_user("root", admin=True)
    TOKENS["user"] = p.ensure_user("alice")
    return p


PLATFORM = _platform()
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    schema = schemathesis.openapi.from_asgi(
        f"{API_PREFIX}/openapi.json", create_app(PLATFORM, run_loop=False)
    )


@pytest.fixture(scope="module", autouse=True)
def _closed_at_the_end() -> Iterator[None]:
    yield
    PLATFORM.close()
    shutil.rmtree(PLATFORM.ctx.config.data_dir.parent, ignore_errors=True)
    ops, n, errors = len(SEEN["operations"]), CASES["run"], CASES["errors"]
    print(f"\nschemathesis: {ops} operations, {n} cases, {errors} server errors")


FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)


def _call(case: schemathesis.Case, who: str) -> None:
    response = case.call(headers={"Authorization": f"Bearer {TOKENS[who]}"})
    SEEN["operations"].add(case.operation.label)
    CASES["run"] += 1
    CASES["errors"] += response.status_code >= 500
    assert response.status_code < 500, (
        f"{case.method} {case.formatted_path} as {who} -> {response.status_code}: {response.text[:500]}\n"
        f"{case.as_curl_command()}"
    )


@schema.parametrize()
@FUZZ
def test_no_request_of_a_user_gets_a_server_error(case: schemathesis.Case) -> None:
    _call(case, "user")


@schema.parametrize()
@FUZZ
def test_no_request_of_an_admin_gets_a_server_error(case: schemathesis.Case) -> None:
    _call(case, "admin")


def test_the_fuzzed_document_covers_every_route() -> None:
    ops = list(schema.get_all_operations())
    assert len(ops) >= 20, f"only {len(ops)} operations in the OpenAPI document"
