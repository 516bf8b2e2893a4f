"""How a Slurm worker's run ended: its state, exit code and reason, from Slurm's word on its job
(``squeue --json``: ``commands.SlurmJob``) and the status file its launcher (or its monitor) wrote.

``SlurmBackend._refresh`` calls :func:`record_end` for each run Slurm no longer runs:

    stopped by us            -> Stopped (its exit code kept)
    OUT_OF_MEMORY, non-zero  -> Failed, OOMKilled, the limit in the message
    a status file            -> Succeeded / Failed; CutOff / PortHeld when its monitor said so
    no status, Slurm forgot  -> Lost ("gone from Slurm without an exit status")
    no status, Slurm ended   -> Lost (Slurm's state and reason, and the node)
"""

from __future__ import annotations

import json

from paddlecloud.backends.base import BackendEvent
from paddlecloud.backends.local.sandbox import read_status
from paddlecloud.backends.slurm import commands as sc
from paddlecloud.backends.slurm.job_record import JobRecord, WorkerRecord
from paddlecloud.backends.slurm.script import DEFAULT_NEED, status_file
from paddlecloud.core.phases import ENDED_WORKER_STATES, WorkerReason, WorkerState

__all__ = ["exit_status", "exit_why", "record_end"]


def record_end(
    job: JobRecord, w: WorkerRecord, sj: sc.SlurmJob | None, status: int | None, now: float
) -> None:
    """Mark the run of ``w`` that Slurm or its launcher ended (``sj``: its Slurm job, None once Slurm
    forgot it; ``status``: its launcher's exit status) with its state, exit code and reason."""
    if w.state in ENDED_WORKER_STATES:
        return
    w.finished_at = now
    if w.started_at is None:
        w.started_at = now
    if w.stopped:
        w.state, w.exit_code = WorkerState.STOPPED, status
    elif sj is not None and sj.out_of_memory and status != 0:
        # the kernel killed it (or a process of it) at its --mem: failed, for that reason (a run
        # whose launcher was killed too wrote no status: 137, as for any SIGKILL)
        need = job.launch.resources.get(w.role, DEFAULT_NEED)
        w.state, w.exit_code = WorkerState.FAILED, 137 if status is None else status
        w.why, w.message = WorkerReason.OOM_KILLED, sc.oom_message(need.memory, sj)
        w.reason = f"{w.why}: {w.message}"
        job.events.append(BackendEvent("Warning", str(WorkerReason.OOM_KILLED), f"{w.name}: {w.message}"))
    elif status is not None:
        w.exit_code = status
        w.state = WorkerState.SUCCEEDED if status == 0 else WorkerState.FAILED
        why, message = exit_why(job, w)
        if why in (WorkerReason.CUT_OFF, WorkerReason.PORT_HELD):  # its monitor or launcher said why
            w.why, w.message = why, message
            w.reason = f"{why}: {message}"
    elif sj is None:
        w.state, w.reason = WorkerState.LOST, "gone from Slurm without an exit status"
    elif sj.ended:
        w.state = WorkerState.LOST
        w.reason = f"Slurm {sj.state}" + (f": {sj.reason}" if sj.reason not in ("", "None") else "")
        w.reason += f" on {sj.nodes}" if sj.nodes else ""


def exit_status(job: JobRecord, w: WorkerRecord) -> int | None:
    """The exit code its launcher wrote for the run, None while there is none."""
    try:
        raw = json.loads(read_status(status_file(job, w)))  # the job's folder: no link, no FIFO
        code = raw["exit_code"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return code if isinstance(code, int) else None


def exit_why(job: JobRecord, w: WorkerRecord) -> tuple[WorkerReason, str]:
    """Why the run ended, where its monitor said (``reason``, ``message`` in its status)."""
    try:
        raw = json.loads(read_status(status_file(job, w)))
        why, message = WorkerReason(raw.get("reason") or ""), str(raw.get("message") or "")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return WorkerReason.NONE, ""
    return why, message[:500]
