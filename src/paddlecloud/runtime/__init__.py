"""What runs inside a worker: the env contract reader and the process launcher.

Everything under ``paddlecloud.runtime`` uses only the standard library, because it is imported by
training programs inside their own virtual environments (the platform puts ``paddlecloud`` on their
``PYTHONPATH``). Use :func:`env` to read the contract instead of parsing variables by hand::

    from paddlecloud.runtime import env
    ctx = env()
    if ctx.role == "trainer" and ctx.trainer_id == 0:
        save(model, ctx.output_dir)

A job submitted with tasks (``--tasks-from-input``) reads its data through its task master::

    from paddlecloud.runtime import tasks
    for task in tasks():            # leased, renewed, acknowledged when the body ends
        train_on(task.local_path)

A PyTorch job with an adaptive batch size drives its loop with ``AdaptiveDDP`` (its arithmetic and
talking in ``runtime.adaptive``, the torch side in ``runtime.adaptive_torch``)::

    from paddlecloud.runtime import AdaptiveDDP
    ada = AdaptiveDDP(model, optimizer, batch=32, max_local_batch=256)

Both are imported on first use (here, the package's face: the launcher of every worker needs
neither, and ``adaptive_torch`` imports torch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from paddlecloud.runtime.env import WorkerEnv, env

if TYPE_CHECKING:
    from paddlecloud.runtime.adaptive_torch import AdaptiveDDP
    from paddlecloud.runtime.taskmaster import LeaseLost, Task, TaskMaster, TaskMasterError, tasks

__all__ = ["AdaptiveDDP", "LeaseLost", "Task", "TaskMaster", "TaskMasterError", "WorkerEnv", "env", "tasks"]

_TASKMASTER = frozenset({"LeaseLost", "Task", "TaskMaster", "TaskMasterError", "tasks"})


def __getattr__(name: str) -> Any:
    """The task master client and AdaptiveDDP are imported on first use: the launcher (every worker)
    never needs them."""
    if name in _TASKMASTER:
        from paddlecloud.runtime import taskmaster

        return getattr(taskmaster, name)
    if name == "AdaptiveDDP":
        from paddlecloud.runtime import adaptive_torch

        return adaptive_torch.AdaptiveDDP
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
