"""A throw-away platform for benchmarks: ``paddlecloud up`` in a temporary directory, and an SDK
client logged in to it (the e2e suite's ``Server``). Usage::

    with platform() as (srv, client, base):
        ...  # base: a scratch directory for packages
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.e2e.conftest import Server

from paddlecloud.client import Client, load_config

__all__ = ["platform"]


@contextmanager
def platform(up_args: list[str] | None = None) -> Iterator[tuple[Server, Client, Path]]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "home").mkdir()
        srv = Server(data_dir=base / "data", home=base / "home")
        if up_args is not None:
            srv.up_args = up_args
        srv.start()
        try:
            os.environ["PADDLECLOUD_CONFIG"] = srv.env["PADDLECLOUD_CONFIG"]
            cfg = load_config()
            assert cfg.current is not None
            yield srv, Client(cfg.current.endpoint, cfg.current.token), base
        finally:
            srv.stop()
