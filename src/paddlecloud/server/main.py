"""Run the platform server: open the platform, make sure the default user exists, serve with Uvicorn.

``paddlecloud up`` calls :func:`prepare` (which returns the default user's token so the CLI can write
the client config, and the isolation jobs run with, which ``up`` prints) and then :func:`serve`
(plain HTTP, or https with ``up --tls-cert/--tls-key``). ``paddlecloud operator`` calls
:func:`run_operator` (the Kubernetes backend's operator, a separate process beside the server).

The default user's token lives only in the client config (``~/.paddle/config``, mode 0600): never in
the data dir, where a job could find it. ``up`` hands back the token the client config already holds
when it still authenticates as the default admin, else it issues a new one.
"""

from __future__ import annotations

import gc
import logging
import ssl
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import uvicorn
from fastapi import FastAPI

from paddlecloud.api.errors import PaddleCloudError
from paddlecloud.backends.errors import IsolationError
from paddlecloud.backends.options import OptionError
from paddlecloud.backends.registry import BackendConfigError, BackendEntry, UnknownBackend, backend_names
from paddlecloud.backends.registry import entry as backend_entry
from paddlecloud.controller import ComputeLimits, ForecastSettings, MetricsAccess, Platform, PlatformConfig
from paddlecloud.server.addresses import ServerUrls, server_urls
from paddlecloud.server.app import create_app
from paddlecloud.server.pfs_data import DataPort

__all__ = [
    "BackendConfigError",
    "ComputeLimits",
    "DataPort",
    "DataPortError",
    "ForecastSettings",
    "IsolationError",
    "MetricsAccess",
    "OptionError",
    "PlatformConfig",
    "Prepared",
    "ServerUrls",
    "UnknownBackend",
    "backend_entries",
    "backend_entry",
    "open_data_port",
    "prepare",
    "run_operator",
    "serve",
    "server_urls",
]

#: where earlier versions kept the default user's token (read once, then removed)
LEGACY_TOKEN_FILE = "default-user.token"


@dataclass(frozen=True)
class Prepared:
    app: FastAPI
    #: the default user's API token, for the client config
    token: str
    #: how jobs are confined, and whether at all (``up`` says it loudly when they are not)
    isolation: str
    confined: bool


def _default_token(platform: Platform, config: PlatformConfig, known: Sequence[str]) -> str:
    """The first of ``known`` (the client config's) that still authenticates as the default admin,
    else a new token. A token file left in the data dir by an older version is tried too, then
    removed: nothing a job could read may hold a token."""
    legacy = Path(config.data_dir) / LEGACY_TOKEN_FILE
    candidates = list(known)
    if legacy.is_file():
        candidates.append(legacy.read_text().strip())
    try:
        for token in candidates:
            try:
                who = platform.authenticate(token)
            except PaddleCloudError:  # rotated, or another server's
                continue
            if who.name == config.default_user and who.is_admin:
                return token
        return platform.ensure_user(config.default_user, admin=True)
    finally:
        legacy.unlink(missing_ok=True)


def prepare(config: PlatformConfig, known_tokens: Sequence[str] = ()) -> Prepared:
    """Open the platform (IsolationError when ``config.isolation`` cannot be had) and settle the
    default user's token (``known_tokens``: what the client config holds for it)."""
    platform = Platform.open(config)
    token = _default_token(platform, config, known_tokens)
    confinement = platform.ctx.backend.confinement()
    isolation, confined = confinement.description, confinement.confined
    return Prepared(create_app(platform), token, isolation, confined)


def backend_entries() -> tuple[BackendEntry, ...]:
    """Every backend ``up --backend`` knows (the backend registry)."""
    return tuple(backend_entry(n) for n in backend_names())


class DataPortError(Exception):
    """The PFS data port asked for (``up --data-port N``) cannot listen: the message says why."""


def open_data_port(
    app: FastAPI, host: str, port: int, tls: tuple[str, str] | None, choice: int | Literal["auto", "off"]
) -> DataPort | None:
    """The PFS data port (``server.pfs_data``) beside the API on ``host``: ``choice`` a port, or
    ``auto`` (any free one: the API's port + 1 could be the one another server on this host is about
    to take), or ``off`` (None: the API serves the chunks). Started; the app's ``GET /pfs/home``
    names it from then on."""
    if choice == "off":
        return None
    ctx: ssl.SSLContext | None = None
    if tls is not None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(*tls)
    try:
        data = DataPort(app.state.platform, host, 0 if choice == "auto" else choice, ctx)
    except OSError as exc:
        raise DataPortError(f"the PFS data port cannot listen on {host}:{choice}: {exc}") from None
    app.state.data_port = data.start()
    app.state.pfs_data = data  # stopped by the app's lifespan, before the platform closes
    return data


def serve(
    app: FastAPI, host: str, port: int, tls: tuple[str, str] | None = None, data: DataPort | None = None
) -> None:
    """Serve ``app``; with ``tls`` = (certificate file, key file) over https only. ``data``: the
    PFS data port (:func:`open_data_port`), stopped when the server stops."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cert, key = tls or (None, None)
    _tune_gc()
    try:
        # the standard asyncio loop, not uvloop: same throughput here, but under 50 busy connections
        # uvloop served a few hundred requests 0.3-0.7 s late (wrk p99 170-500 ms against 30-77 ms)
        uvicorn.run(
            app,
            host=host,
            port=port,
            loop="asyncio",
            http="httptools",
            log_level="warning",
            access_log=False,
            ssl_certfile=cert,
            ssl_keyfile=key,
        )
    finally:
        if data is not None:
            data.stop()


def _tune_gc() -> None:
    """Fewer, shorter garbage-collector pauses while serving.

    The objects alive after start-up (modules, the app, the ORM's mappers) are moved out of the
    collector's sight (``gc.freeze``), and the young generation is collected every 20,000 allocations
    instead of 700. Under load, full collections over the whole heap otherwise stalled every request
    for 50-190 ms a few times a minute (measured with ``bench/api_load.py``): the p99 latency.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


def run_operator(argv: list[str]) -> int:
    """The TrainingJob operator (needs the optional extra ``kubernetes``); ``argv``: its options."""
    from paddlecloud.backends.kubernetes.operator import main

    return main(argv)
