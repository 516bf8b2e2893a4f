"""The file service's answers (``api.files``) parsed at the client's edge: typed, checked, and a bad
answer a ``ServerError`` naming the field, never a ``KeyError`` or ``TypeError`` out of the SDK."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from paddlecloud.api.errors import ServerError
from paddlecloud.api.files import FileInfo, FileList, LocalGrant, StorageUsage, UploadView

__all__: list[str] = []

WHEN = datetime(2026, 12, 3, 14, 0, tzinfo=UTC)


def test_an_answer_round_trips_through_its_json() -> None:
    listing = FileList(items=[FileInfo(path="/pfs/local/home/a/x", type="file", size=3, mtime=WHEN)])
    wire = json.loads(json.dumps(listing.to_wire()))
    assert wire["items"][0]["mtime"] == "2026-12-03T14:00:00Z"  # as the server (pydantic) writes it
    assert FileList.from_wire(wire) == listing
    up = UploadView(id="u1", path="/p", size=10, chunk_size=4, chunks=3, received={0: "d0", 2: "d2"})
    assert UploadView.from_json(json.dumps(up.to_wire()).encode()) == up  # chunk keys back to int


def test_missing_optional_fields_take_their_defaults() -> None:
    u = StorageUsage.from_wire({"user": "a", "used": 5, "reserved": 0, "limit": None})
    assert (u.limit, u.samplesets, u.jobs, u.pfs) == (None, 0, 0, 0)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"<html>proxy error</html>", "not JSON"),
        (b"[1, 2]", "expected an object"),
        (b'{"path": "/p", "type": "file", "mtime": "2026-12-03T14:00:00+00:00"}', "'size' is missing"),
        (b'{"path": "/p", "type": "file", "size": "3", "mtime": "2026-12-03"}', "'size'"),
        (b'{"path": "/p", "type": "file", "size": true, "mtime": "2026-12-03"}', "'size'"),
        (b'{"path": "/p", "type": "file", "size": 3, "mtime": "yesterday"}', "'mtime'"),
    ],
)
def test_a_bad_answer_is_a_server_error_naming_the_field(content: bytes, says: str) -> None:
    with pytest.raises(ServerError, match="not understood") as err:
        FileInfo.from_json(content)
    assert says in str(err.value)


def test_a_bad_nested_item_or_number_is_caught_too() -> None:
    with pytest.raises(ServerError, match="'type' is missing"):
        FileList.from_wire({"items": [{"path": "/p"}]})
    with pytest.raises(ServerError, match="'items'"):
        FileList.from_wire({"items": 5})
    with pytest.raises(ServerError, match="'received'"):
        UploadView.from_wire(
            {"id": "u", "path": "/p", "size": 1, "chunk_size": 1, "chunks": 1, "received": {"x": "d"}}
        )
    assert LocalGrant.from_wire({"grant": "g", "address": "@a", "expires_in": 5}).expires_in == 5.0
