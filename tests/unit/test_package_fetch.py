"""``fetch-package``: a backend whose workers cannot read the server's files gets a package URL that
the job's token opens, and the worker-side bootstrap fetches and unpacks the package with it."""

from __future__ import annotations

from pathlib import Path

import pytest
from task_helpers import HttpServer, free_port

from paddlecloud.backends import BackendConfigError, Capability
from paddlecloud.backends.memory import MemoryBackend, MemoryEngine, MemorySettings
from paddlecloud.backends.memory.backend import ALL
from paddlecloud.client import Client
from paddlecloud.controller import Platform, PlatformConfig
from paddlecloud.runtime.bootstrap import BootstrapError, fetch

FETCHING = MemorySettings(capabilities=ALL | {Capability.FETCH_PACKAGE})


def test_a_worker_fetches_its_package_with_the_job_token(tmp_path: Path) -> None:
    port = free_port()
    engine = MemoryEngine()
    settings = MemorySettings(capabilities=FETCHING.capabilities, engine=engine)
    config = PlatformConfig(data_dir=tmp_path / "data", api_url=f"http://127.0.0.1:{port}")
    platform = Platform.open(config, backend=MemoryBackend(settings))
    server = HttpServer(platform, port).start()
    try:
        alice = Client(endpoint=server.url, token=platform.ensure_user("alice"))
        pkg = tmp_path / "pkg"
        pkg.mkdir()
        (pkg / "train.py").write_text("print('trained')\n")
        alice.submit({"name": "fit", "entry": "python train.py"}, package_dir=pkg)
        platform.reconciler.tick()
        launch = engine.jobs["alice/fit"].launch
        assert launch.package_url == (
            f"http://127.0.0.1:{port}/api/v1/pfs/file?path=/pfs/local/home/alice/jobs/fit/package.tar.gz"
        )
        fetch(tmp_path / "worker", launch.package_url, launch.api.token, attempts=1)
        assert (tmp_path / "worker" / "job" / "train.py").read_text() == "print('trained')\n"
        with pytest.raises(BootstrapError, match="HTTP 401"):  # only with the job's token
            fetch(tmp_path / "stranger", launch.package_url, "pcj_not-a-token", attempts=1)
    finally:
        server.stop()
        platform.close()


def test_a_fetching_backend_needs_an_api_url(tmp_path: Path) -> None:
    with pytest.raises(BackendConfigError, match=r"fetch their job package over the API: .*--api-url"):
        Platform.open(PlatformConfig(data_dir=tmp_path / "data"), backend=MemoryBackend(FETCHING))
