"""What runs inside a worker: the env contract reader and the process launcher.

Everything under ``paddlecloud.runtime`` uses only the standard library, because it is imported by
training programs inside their own virtual environments (the platform puts ``paddlecloud`` on their
``PYTHONPATH``). Use :func:`env` to read the contract instead of parsing variables by hand::

    from paddlecloud.runtime import env
    ctx = env()
    if ctx.role == "trainer" and ctx.trainer_id == 0:
        save(model, ctx.output_dir)
"""

from __future__ import annotations

from paddlecloud.runtime.env import WorkerEnv, env

__all__ = ["WorkerEnv", "env"]
