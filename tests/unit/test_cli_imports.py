"""The import budget of a CLI command: what ``paddlecloud pfs ...`` loads besides what it needs.

Each check runs the ``paddlecloud`` program's own entry (``main()`` with ``sys.argv``) in a fresh
interpreter (this test process has everything imported) against an endpoint where nothing listens,
so the session is built and a request tried (for https, httpcore imported), and reads ``sys.modules`` at exit.
No timing is asserted: the modules a command does not need are named, so a new top-level import of
the job models, Rich, httpx's own command line or the async libraries in that path fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from paddlecloud.client.config import Datacenter, save_datacenter

__all__: list[str] = []

#: modules `pfs stat` / `pfs cp -q` to an http:// endpoint must not load: httpx and httpcore (its
#: session is client.plain's, on http.client), pydantic (the file service's answers are
#: dataclasses, ~65 ms of start-up), the job wire models and the SDK class importing
#: them, the request bodies the server reads (built when imported), PyYAML (the CLI's config file is
#: JSON), Rich (drawn only for a progress bar), httpx's command line (Rich and pygments), and the
#: async libraries httpcore would load for async callers
NOT_FOR_PFS = [
    "pydantic",
    "httpx",
    "httpcore",
    "paddlecloud.api.models",
    "paddlecloud.api.file_requests",
    "yaml",
    "paddlecloud.client.client",
    "rich",
    "rich.table",
    "rich.console",
    "pygments",
    "trio",
    "anyio",
]

#: the probe: count the CA bundles SSL contexts load, run the program, report at exit
PROBE = """
import atexit, gc, json, ssl, sys
CA_LOADS = []
_load = ssl.SSLContext.load_verify_locations
def _counting(self, *a, **kw):
    CA_LOADS.append(1)
    return _load(self, *a, **kw)
ssl.SSLContext.load_verify_locations = _counting
WATCH = {watch!r}
atexit.register(lambda: print(json.dumps(
    {{"modules": [m for m in WATCH if sys.modules.get(m) is not None], "ca_loads": len(CA_LOADS),
      "frozen": gc.get_freeze_count()}}
)))
{setup}
sys.argv = ["paddlecloud", *{args!r}]
from paddlecloud.cli.main import main
main({argv})
"""


def run(
    tmp_path: Path, *args: str, endpoint: str = "http://127.0.0.1:9", setup: str = "", program: bool = True
) -> dict[str, Any]:
    """``paddlecloud ARGS`` in a fresh interpreter (nothing listens at ``endpoint``: exit 3); what
    of NOT_FOR_PFS it imported, how many CA bundles it loaded, how many objects it froze.
    ``program=False``: ``main([...])`` instead of the program's ``main()``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PADDLECLOUD_")}
    env.update(
        PADDLECLOUD_CONFIG=str(tmp_path / "config"), PADDLECLOUD_ENDPOINT=endpoint, PADDLECLOUD_TOKEN="t"
    )
    argv = "" if program else repr(list(args))  # main([...]): how tests run commands in-process
    code = PROBE.format(watch=NOT_FOR_PFS, setup=setup, args=list(args), argv=argv)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 3, out.stderr  # the server cannot be reached: the request was tried
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def test_pfs_commands_import_no_job_models_rich_or_async_libraries(tmp_path: Path) -> None:
    here = Datacenter(name="here", endpoint="http://127.0.0.1:9", token="t")
    save_datacenter(here, path=tmp_path / "config")  # the config file as `login` writes it
    (tmp_path / "f").write_bytes(b"x" * 100)
    assert run(tmp_path, "pfs", "stat", "pfs:x")["modules"] == []
    assert run(tmp_path, "pfs", "cp", "-q", str(tmp_path / "f"), "pfs:f")["modules"] == []


def test_only_the_program_freezes_its_import_time_objects(tmp_path: Path) -> None:
    """The program freezes what its imports made (gc.freeze: not scanned again, also not at exit);
    ``main([...])`` (a test running a command in its own process) leaves the collector alone."""
    assert int(run(tmp_path, "pfs", "stat", "pfs:x")["frozen"]) > 10_000
    assert run(tmp_path, "pfs", "stat", "pfs:x", program=False)["frozen"] == 0


def test_a_plain_http_endpoint_loads_no_ca_bundle_and_https_still_verifies(tmp_path: Path) -> None:
    assert run(tmp_path, "pfs", "stat", "pfs:x")["ca_loads"] == 0
    tls = run(tmp_path, "pfs", "stat", "pfs:x", endpoint="https://127.0.0.1:9")
    assert tls["ca_loads"] >= 1
    assert {"httpx", "httpcore"} <= set(tls["modules"])  # https keeps httpx's verifying session


def test_the_probe_sees_what_it_looks_for(tmp_path: Path) -> None:
    """The probe can fail: a command that imports ``Client`` (every job model), and imports made
    before the program starts, are seen."""
    got = run(tmp_path, "get", "jobs", setup="import anyio, rich.table")
    assert {"paddlecloud.api.models", "paddlecloud.client.client", "anyio", "rich.table"} <= set(
        got["modules"]
    )


def test_the_lazy_sdk_names_are_the_functions_and_classes_not_modules() -> None:
    """``paddlecloud.train`` / ``paddlecloud.client.train`` stay the function once the SDK's names
    are lazy (a submodule of the same name would shadow it), and ``Client`` the class."""
    code = (
        "import paddlecloud, paddlecloud.client as c\n"
        "from paddlecloud.client import train, Client\n"
        "print(paddlecloud.train.__name__, c.train.__name__, train.__name__, type(train).__name__,"
        " type(paddlecloud.Client).__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["train", "train", "train", "function", "type"]
