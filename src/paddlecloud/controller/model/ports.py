"""What the model and the loop need of PFS, as a protocol: the file service itself is a service
(``services.files.FileService``, the one implementation) and the layers below the services may not
import it.

    Context.files: PfsSpace ──parse / local_path──▶ where a job's input, output and package lie on
                                                   this machine (launches, SampleSet sources)
    loop.diskwatch ──quota_of / held_elsewhere / walk_home──▶ a user's storage use and limit

Services that move files (jobs, SampleSets, tasks) are handed the ``FileService`` itself by the
platform's wiring, not reached through the context.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

from paddlecloud.core.pfspath import PfsPath

__all__ = ["PfsSpace"]


class PfsSpace(Protocol):
    #: a user's storage limit in bytes (None: unlimited)
    quota_of: Callable[[str], int | None]
    #: bytes a user holds outside PFS (their SampleSets' caches)
    held_elsewhere: Callable[[str], int]

    def parse(self, text: str) -> PfsPath:
        """A path stored by the platform itself (already checked when it was accepted)."""
        ...

    def local_path(self, path: PfsPath) -> Path | None:
        """Where a job's workers find ``path`` on this machine (local stores only)."""
        ...

    def walk_home(self, user: str) -> Iterator[int]:
        """The bytes of ``user``'s home as a walk that can be paused (running totals, the last the
        total): the disk watch's measure."""
        ...
