"""Wire models of a job's data task master (``/api/v1/jobs/{name}/tasks``).

Request: :class:`TaskSpec` (the ``tasks`` field of a ``JobSpec``: how the input becomes tasks),
:class:`LeaseRequest` and :class:`AckRequest` (what trainers send). Responses: :class:`TaskLease`
(a lease, or wait, or finished), :class:`TaskView` (one task), :class:`TaskList` (a summary and
one page of tasks, in index order: ``paddlecloud get tasks`` follows ``next_after``). The runtime
client (``paddlecloud.runtime.taskmaster``) reads these as plain JSON: the field names are the
contract.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from paddlecloud.api.body import Body
from paddlecloud.api.stored import is_stored
from paddlecloud.core.limits import text_problem
from paddlecloud.core.quantity import QuantityError, check_length, parse_memory
from paddlecloud.core.tasks import TaskKind, TaskState

__all__ = [
    "MAX_ITEMS",
    "MAX_ITEMS_BYTES",
    "MAX_PAGE",
    "MAX_TASKS",
    "PAGE",
    "AckRequest",
    "LeaseRequest",
    "TaskLease",
    "TaskList",
    "TaskSpec",
    "TaskSummary",
    "TaskView",
]

#: the most tasks one job may have (a bigger input: use a larger chunk_size or a coarser list)
MAX_TASKS = 100_000
#: tasks per page of ``GET /jobs/{name}/tasks`` by default, and at most
PAGE = 1000
MAX_PAGE = 10_000
#: the most explicit tasks (``items``) a spec may list, and the most bytes (UTF-8) they may hold in
#: all: a spec is a small request (``up --max-request-size``, 1 MiB by default); a longer list
#: belongs in a file of the input (one task per file, or byte ranges with ``chunk_size``)
MAX_ITEMS = 10_000
MAX_ITEMS_BYTES = 512 * 1024


def _size(v: str, info: ValidationInfo) -> str:
    try:
        if not is_stored(info):
            check_length(v, "memory")
        if parse_memory(v) < 1:
            raise ValueError("chunk_size must be at least 1 byte")
    except QuantityError as exc:
        raise ValueError(str(exc)) from None
    return v


class _Model(BaseModel):
    model_config = ConfigDict(defer_build=True)


class _Strict(_Model):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class TaskSpec(_Strict):
    """How a job's data is handed to its trainers. Tasks are the files of the job's ``input`` (those
    matching ``pattern``; with ``chunk_size``, files larger than it are split into byte ranges), or
    the explicit ``items``."""

    items: list[Annotated[str, Field(min_length=1, max_length=4096)]] | None = Field(
        None,
        min_length=1,
        max_length=MAX_TASKS,
        description=f"explicit tasks (default: the input's files): at most {MAX_ITEMS:,}, each at most "
        f"4,096 characters, {MAX_ITEMS_BYTES // 1024} KiB in all",
    )
    pattern: str = Field("*", min_length=1, max_length=255, description="glob on the input's file names")
    chunk_size: Annotated[str, AfterValidator(_size)] | None = Field(
        None, description="split larger files into byte ranges of this size (e.g. 64Mi)"
    )
    num_passes: int = Field(1, ge=1, le=10_000, strict=True, description="passes (epochs) over every task")
    lease_timeout: float = Field(
        30.0, ge=1, le=86_400, strict=True, description="seconds a lease lasts unless renewed"
    )
    max_failures: int = Field(
        3, ge=1, le=1000, strict=True, description="failures (or expired leases) before a task fails"
    )

    @field_validator("items")
    @classmethod
    def _items(cls, v: list[str] | None, info: ValidationInfo) -> list[str] | None:
        if v is None or is_stored(info):
            return v
        if len(v) > MAX_ITEMS:
            raise ValueError(
                f"{len(v):,} tasks, at most {MAX_ITEMS:,} may be listed; put the data in files of the input "
                "and use --tasks-from-input (one task per file, or byte ranges with --task-chunk-size)"
            )
        size = sum(len(item.encode()) for item in v)
        if size > MAX_ITEMS_BYTES:
            raise ValueError(
                f"the tasks hold {size:,} bytes, at most {MAX_ITEMS_BYTES:,} are allowed; list shorter "
                "items, or put the data in files of the input and use --tasks-from-input"
            )
        for i, item in enumerate(v):
            if problem := text_problem(item):
                raise ValueError(f"task {i}: {problem}")
        return v

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if self.items is not None and (self.chunk_size is not None or self.pattern != "*"):
            raise ValueError("tasks: give either items or pattern/chunk_size (the input's files), not both")
        return self


class LeaseRequest(Body):
    lease: str = Field(pattern=r"^[A-Za-z0-9_-]{8,64}$", description="a random id chosen by the trainer")
    worker: str = Field("", max_length=56, description="who asks (shown in get tasks)")
    run: int = Field(0, ge=0, le=999_999, strict=True, description="the worker's run (PADDLECLOUD_RESTART)")


class AckRequest(Body):
    lease: str = Field(pattern=r"^[A-Za-z0-9_-]{8,64}$")
    error: str = Field("", max_length=4096, description="fail: what went wrong")


class TaskView(_Model):
    index: int
    kind: TaskKind
    #: relative to the job's input (file, range), or the item's text
    path: str
    offset: int = 0
    length: int | None = None
    state: TaskState
    #: the pass this state belongs to (0-based)
    pass_no: int = 0
    holder: str = ""
    expires_at: datetime | None = None
    failures: int = 0
    #: how many times the task was handed out, over every pass
    leases: int = 0
    #: in how many passes it was acknowledged done (each at most once)
    done_passes: int = 0
    #: the last failure in this pass (expired lease, fail, holder ended), kept when then done
    error: str = ""


class TaskLease(_Model):
    """``leased``: ``task`` is yours under ``lease`` for ``lease_seconds`` (renew before then);
    ``wait``: every remaining task of this pass is leased, ask again in ``retry_after`` seconds;
    ``finished``: every pass is over."""

    status: Literal["leased", "wait", "finished"]
    task: TaskView | None = None
    lease: str = ""
    lease_seconds: float = 0.0
    pass_no: int = 0
    num_passes: int = 1
    retry_after: float = 0.0


class TaskSummary(_Model):
    total: int
    todo: int
    leased: int
    done: int
    failed: int
    pass_no: int
    num_passes: int
    finished: bool
    lease_timeout: float
    max_failures: int


class TaskList(_Model):
    """The summary (counts over every task) and one page of tasks in index order."""

    summary: TaskSummary
    items: list[TaskView]
    #: more tasks follow: ask again with ``after`` = this (the last index here); None: the last page
    next_after: int | None = None
