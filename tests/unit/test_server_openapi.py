"""The REST API is described by an OpenAPI document served under /api/v1."""

from __future__ import annotations

import httpx


def test_openapi_lists_every_route(raw_http: httpx.Client) -> None:
    r = raw_http.get("/api/v1/openapi.json")
    assert r.status_code == 200
    paths = r.json()["paths"]
    expected = ["health", "version", "pfs/list", "pfs/uploads", "jobs", "jobs/{name}", "jobs/{name}/kill",
                "jobs/{name}/workers", "jobs/{name}/logs", "quota"]  # fmt: skip
    assert {f"/api/v1/{p}" for p in expected} <= set(paths)
    assert set(paths["/api/v1/jobs/{name}"]) == {"get", "delete"}
    assert "JobSpec" in r.json()["components"]["schemas"]


def test_unknown_route_answers_in_the_error_format(raw_http: httpx.Client) -> None:
    r = raw_http.get("/api/v1/nope")
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "invalid_request"
