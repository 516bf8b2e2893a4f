"""A job's current membership, inside a worker: who the trainers and pservers are *now*.

``PADDLECLOUD_TRAINERS`` and the endpoint variables are what the job looked like when the worker
started. An elastic job is grown and shrunk while it runs; frameworks with their own rendezvous
(torchrun) learn of it themselves, every other program reads it here. Standard library only::

    from paddlecloud.runtime import membership
    m = membership.current()                  # Membership(version, trainers, endpoints, ...)
    for m in membership.changes():            # blocks; yields each new membership
        rescale(m.trainers)

Where it comes from:

    backend ──writes atomically on every resize──▶ $PADDLECLOUD_MEMBERSHIP_FILE (JSON)
    worker  ──current() / changes()──▶ reads the file (polled by mtime)

``version`` grows with every change (milliseconds of the change), so comparing versions tells
whether anything changed; ``trainer_endpoints`` are in trainer index order (a shrink removes the
highest indices).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from paddlecloud.runtime import contract as c

__all__ = ["Membership", "MembershipUnavailable", "changes", "current", "write"]


class MembershipUnavailable(RuntimeError):
    """The worker was not given a membership file (an older backend), or it cannot be read."""


@dataclass(frozen=True)
class Membership:
    version: int
    trainers: int
    trainer_endpoints: tuple[str, ...]
    pserver_endpoints: tuple[str, ...]

    def to_json(self) -> str:
        return json.dumps(
            {
                "version": self.version,
                "trainers": self.trainers,
                "trainer_endpoints": list(self.trainer_endpoints),
                "pserver_endpoints": list(self.pserver_endpoints),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Membership:
        d = json.loads(text)
        return cls(
            version=int(d["version"]),
            trainers=int(d["trainers"]),
            trainer_endpoints=tuple(str(e) for e in d["trainer_endpoints"]),
            pserver_endpoints=tuple(str(e) for e in d["pserver_endpoints"]),
        )


def _path(environ: Mapping[str, str] | None) -> str:
    path = (environ if environ is not None else os.environ).get(c.MEMBERSHIP_FILE, "")
    if not path:
        raise MembershipUnavailable(f"{c.MEMBERSHIP_FILE} is not set: this backend does not publish it")
    return path


def current(environ: Mapping[str, str] | None = None) -> Membership:
    """The job's membership now."""
    path = _path(environ)
    try:
        with open(path, encoding="utf-8") as f:
            return Membership.from_json(f.read())
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MembershipUnavailable(f"cannot read {path}: {exc}") from None


def changes(
    since: Membership | None = None, *, poll: float = 0.5, environ: Mapping[str, str] | None = None
) -> Iterator[Membership]:
    """Yield the membership each time it changes after ``since`` (default: the current one)."""
    path = _path(environ)
    seen = since if since is not None else current(environ)
    stamp = 0.0
    while True:
        try:
            mtime = os.stat(path).st_mtime
        except OSError:
            mtime = stamp
        if mtime != stamp:
            stamp = mtime
            now = current(environ)
            if now.version != seen.version:
                seen = now
                yield now
        time.sleep(poll)


def write(path: str, m: Membership) -> None:
    """Publish ``m`` at ``path`` atomically (the backend's side): readers see the old file or the new
    one, never a part."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(m.to_json())
    os.replace(tmp, path)


def now_version() -> int:
    """A version for a membership published now: later than any earlier one of this clock."""
    return time.time_ns() // 1_000_000
