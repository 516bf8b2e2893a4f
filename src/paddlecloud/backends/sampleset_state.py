"""What a server process knows of each JuiceFS SampleSet it manages, shared by the backends that
keep the volume on the server's host (local, Slurm: ``LocalSampleSets`` and its Slurm subclass).

    start_task ──▶ TaskRecord (state, done / total, message, its thread) ──view()──▶ SampleTaskStatus
    ensure     ──▶ SetRecord (the ref, the Volume, its tasks, the locks that order work on it)
    delete / close ──▶ SetRecord.cancel set ──▶ a task's progress callback raises Cancelled
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from paddlecloud.backends.samplesets import SampleSetRef, SampleTask, SampleTaskState, SampleTaskStatus
from paddlecloud.storage.juicefs import Volume

__all__ = ["Cancelled", "SetRecord", "TaskRecord"]


class Cancelled(Exception):
    """Raised in a task's progress callback to stop its command (delete, close)."""


@dataclass
class TaskRecord:
    task: SampleTask
    state: SampleTaskState = SampleTaskState.RUNNING
    done: int = 0
    total: int = 0
    message: str = ""
    thread: threading.Thread | None = None

    def view(self) -> SampleTaskStatus:
        return SampleTaskStatus(self.state, self.done, self.total, self.message)


@dataclass
class SetRecord:
    """What this process knows of one SampleSet."""

    ref: SampleSetRef
    volume: Volume
    formatted: bool = False
    tasks: dict[str, TaskRecord] = field(default_factory=dict)
    #: held while a task runs (one at a time) and while mounts change
    work: threading.Lock = field(default_factory=threading.Lock)
    mounting: threading.RLock = field(default_factory=threading.RLock)
    cancel: threading.Event = field(default_factory=threading.Event)
    #: (files, bytes) as last counted; None: count again (a sync or rmr ran since)
    usage: tuple[int, int] | None = None
