"""Request bodies are built at import, never deferred: FastAPI's adapter of a deferred body model
built its schema at the first request, outside FastAPI's own silencing of Pydantic's
``UnsupportedFieldAttributeWarning`` about the body's alias, and ``paddlecloud up`` printed it."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

from fastapi.routing import APIRoute
from pydantic import BaseModel

from paddlecloud.api.body import Body
from paddlecloud.client import Client
from paddlecloud.server import (
    routes_adaptive,
    routes_jobs,
    routes_pfs,
    routes_system,
    routes_tasks,
    routes_users,
)


def test_every_body_the_server_reads_is_a_built_body_model() -> None:
    routers = (routes_adaptive, routes_jobs, routes_pfs, routes_system, routes_tasks, routes_users)
    bodies = {
        route.path: param.field_info.annotation
        for module in routers
        for route in module.router.routes
        if isinstance(route, APIRoute)
        for param in route.dependant.body_params
    }
    assert len(bodies) >= 11  # jobs, users, quota, PFS namespace and uploads, task leases, reports
    assert "/jobs/{name}/adaptive/report" in bodies
    for path, model in bodies.items():
        assert isinstance(model, type) and issubclass(model, BaseModel), path
        if model.model_config.get("strict") is not True:  # AdminUpdate: strict, never deferred
            assert issubclass(model, Body), path
        assert not model.model_config.get("defer_build"), path
        assert model.__pydantic_complete__, path


def test_the_first_requests_with_a_body_warn_nothing(
    client_for: Callable[..., Client], tmp_path: Path
) -> None:
    alice = client_for("alice")  # a new app: its body adapters are built now
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "train.py").write_text("print('hi')\n")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        alice.pfs.mkdir("pfs:a/b", parents=True)  # POST /pfs/mkdir
        alice.pfs.mv("pfs:a/b", "pfs:a/c")  # POST /pfs/move
        alice.submit({"name": "hi", "entry": "python train.py"}, package_dir=pkg)  # POST /jobs
    assert [str(w.message) for w in seen] == []
