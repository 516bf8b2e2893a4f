"""Run the platform server: open the platform, make sure the default user exists, serve with Uvicorn.

``paddlecloud up`` calls :func:`prepare` (which returns the default user's token so the CLI can write
the client config) and then :func:`serve` (plain HTTP, or https with ``up --tls-cert/--tls-key``).
``paddlecloud operator`` calls :func:`run_operator` (the Kubernetes backend's operator, a separate
process beside the server).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import uvicorn
from fastapi import FastAPI

from paddlecloud.backends.kubernetes.settings import KubeSettings
from paddlecloud.backends.local import NodeShape
from paddlecloud.controller import ComputeLimits, Platform, PlatformConfig
from paddlecloud.server.app import create_app

__all__ = ["ComputeLimits", "KubeSettings", "NodeShape", "PlatformConfig", "prepare", "run_operator", "serve"]

TOKEN_FILE = "default-user.token"


def _default_token(platform: Platform, config: PlatformConfig) -> str:
    """Reuse the token saved by an earlier ``up`` when it still authenticates; else issue one."""
    path = Path(config.data_dir) / TOKEN_FILE
    if path.exists():
        token = path.read_text().strip()
        try:
            platform.authenticate(token)
            return token
        except Exception:  # rotated or a different database: issue a new one
            pass
    token = platform.ensure_user(config.default_user, admin=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def prepare(config: PlatformConfig) -> tuple[FastAPI, str]:
    platform = Platform.open(config)
    token = _default_token(platform, config)
    return create_app(platform), token


def serve(app: FastAPI, host: str, port: int, tls: tuple[str, str] | None = None) -> None:
    """Serve ``app``; with ``tls`` = (certificate file, key file) over https only."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    cert, key = tls or (None, None)
    uvicorn.run(
        app, host=host, port=port, log_level="warning", access_log=False, ssl_certfile=cert, ssl_keyfile=key
    )


def run_operator(argv: list[str]) -> int:
    """The TrainingJob operator (needs the optional extra ``kubernetes``); ``argv``: its options."""
    from paddlecloud.backends.kubernetes.operator import main

    return main(argv)
