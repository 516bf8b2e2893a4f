"""A throw-away platform for benchmarks: ``paddlecloud up`` in a temporary directory, and an SDK
client logged in to it (the e2e suite's ``Server``). Usage::

    with platform() as (srv, client, base):
        ...  # base: a scratch directory for packages

``prepare(data_dir)`` runs before the server starts (e.g. ``bench.list_jobs.fill`` a history);
``pythonpath``: the server process's ``PYTHONPATH`` (a ``sitecustomize`` that changes it);
``token(srv)``: the default admin's API token.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.e2e.conftest import Server

from paddlecloud.client import Client, load_config

__all__ = ["platform", "token"]


@contextmanager
def platform(
    up_args: list[str] | None = None,
    prepare: Callable[[Path], None] | None = None,
    pythonpath: str | None = None,
) -> Iterator[tuple[Server, Client, Path]]:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        (base / "home").mkdir()
        srv = Server(data_dir=base / "data", home=base / "home")
        if up_args is not None:
            srv.up_args = up_args
        if prepare is not None:
            prepare(srv.data_dir)
        saved = os.environ.get("PYTHONPATH")
        if pythonpath is not None:
            os.environ["PYTHONPATH"] = pythonpath
        try:
            srv.start()
        finally:
            os.environ.pop("PYTHONPATH", None)
            if saved is not None:
                os.environ["PYTHONPATH"] = saved
        try:
            os.environ["PADDLECLOUD_CONFIG"] = srv.env["PADDLECLOUD_CONFIG"]
            cfg = load_config()
            assert cfg.current is not None
            yield srv, Client(cfg.current.endpoint, cfg.current.token), base
        finally:
            srv.stop()


def token(srv: Server) -> str:
    """The default admin's API token (from the client config ``up`` wrote)."""
    cfg = load_config(Path(srv.env["PADDLECLOUD_CONFIG"]))
    assert cfg.current is not None
    return cfg.current.token
