"""The REST server: a thin FastAPI layer over the controller (``create_app``) and its runner."""

from __future__ import annotations

from paddlecloud.server.app import create_app

__all__ = ["create_app"]
