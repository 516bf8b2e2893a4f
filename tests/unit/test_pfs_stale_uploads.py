"""Abandoned uploads do not hold quota forever: idle past STALE_UPLOAD_S, they are discarded."""

from __future__ import annotations

import os
import time

from paddlecloud.client import Client
from paddlecloud.controller import Platform
from paddlecloud.controller.services.files import STALE_UPLOAD_S


def test_an_abandoned_upload_is_discarded_and_frees_its_reservation(
    alice: Client, platform: Platform
) -> None:
    size = 3 << 20
    up = alice.request(
        "POST",
        "/pfs/uploads",
        json={"path": "/pfs/local/home/alice/x.bin", "size": size, "chunk_size": 1 << 20},
    ).json()
    assert alice.pfs.usage().reserved == size
    staging = platform.ctx.config.pfs_dir / "uploads" / up["id"]
    old = time.time() - STALE_UPLOAD_S - 60
    for p in (staging / "meta.json", staging / "marks"):
        os.utime(p, (old, old))
    assert alice.pfs.usage().reserved == 0
    assert not staging.exists()
