"""SampleSets on the Slurm backend: the server does what needs only the shared file system, and
what touches a node runs on that node as a Slurm job (``samplenode.py``).

    server's host (this module)                         each node (``samplenode.py``, via Slurm)
    ensure ──format the volume, writable admin mount──  -
    sync / rmr ──through the admin mount──              -
    warmup / clear ──sbatch -w NODE (one per node)──▶   mount read-only with the node-local cache
               ◀──reports/tasks/<task>.<node>.json───   dir, juicefs warmup / evict, unmount
    status ◀──reports/<node>.json (cached bytes)─────   written after every change on the node
    a job's worker ──its batch script──────────────▶    ``samplenode run``: mount for this run,
                                                        run the worker, keep its blocks, unmount
    delete ──unmount admin, destroy the volume, then sbatch -w NODE purge on every node with a cache

Everything the local backend does on the server's side (the volume under ``<root>/<uid>/``, its
admin mount, sync, rmr, one task thread per SampleSet, status from ``juicefs info``) is
``LocalSampleSets``'s; this class replaces its per-node mounts (none on the server's host: it is not
a compute node) with node jobs and reports. The volume's metadata is SQLite on the shared
directory here; a real cluster puts it in Redis or PostgreSQL (docs/data.md).

Node jobs are ``-n1 -c1 --mem 512M`` with the site's partition, account (the SampleSet's owner's)
and QOS; they wait in Slurm's queue like any job (bounded: the task fails with Slurm's reason).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shlex
import time
from pathlib import Path

from paddlecloud.backends.local.samplesets import LocalSampleSets
from paddlecloud.backends.sampleset_state import Cancelled, SetRecord, TaskRecord
from paddlecloud.backends.samplesets import (
    NodeCache,
    SampleSetRef,
    SampleSetStatus,
    SampleTaskKind,
)
from paddlecloud.backends.slurm import commands as sc
from paddlecloud.backends.slurm.job_record import slug
from paddlecloud.backends.slurm.samplenode import NodePaths, task_report
from paddlecloud.backends.slurm.settings import SlurmSettings
from paddlecloud.storage.juicefs import JuiceFSError, budget

__all__ = ["SlurmSampleSets"]

log = logging.getLogger("paddlecloud.backends.slurm.samplesets")

#: what a node job asks of Slurm
_NODE_JOB = ["--ntasks=1", "--cpus-per-task=1", "--mem=512M", "--no-requeue"]
#: how long a node job may wait in Slurm's queue before it starts, seconds
_QUEUE_WAIT = 600.0
#: how long ``delete`` waits for the purge jobs (they stay queued for a node that is down)
_PURGE_WAIT = 60.0
_POLL = 1.0


class SlurmSampleSets(LocalSampleSets):
    """``SampleSetBackend`` of the Slurm backend (``root``: on the shared directory)."""

    def __init__(self, settings: SlurmSettings, root: Path) -> None:
        # no node mounts on the server's host, and no node-local copies (the local backend's
        # short-circuit reads): a node's cache is filled on the node, by a node job
        super().__init__(root, (), local_copies=False)
        self.settings = settings
        self.paths = NodePaths(settings.node_cache)

    def reports(self, uid: str) -> Path:
        return self.folder(uid) / "reports"

    # -- what a worker's batch script runs ---------------------------------------------------------

    @staticmethod
    def run_name(user: str, job: str, worker: str, run: int) -> str:
        """One worker run's name on its node (its mount's folder under ``runs/``)."""
        return f"{slug(user)}.{slug(job)}.{worker}.{run}"

    def worker_command(self, ref: SampleSetRef, run: str, status: Path, inner: list[str]) -> list[str]:
        """``inner`` (the launcher, or the sandbox that starts it) preceded by the node side that
        mounts ``ref`` for this run at :meth:`NodePaths.mountpoint` and unmounts after."""
        return [*self._node_argv("run", ref), "--run", run, "--status", str(status), "--", *inner]

    # -- the contract: status, delete ---------------------------------------------------------------

    def status(self, ref: SampleSetRef) -> SampleSetStatus:
        """The volume's files and bytes (the admin mount), and each node's cache as its last node
        job or worker run reported it. ``mounted`` here means the node has mounted it (a warmup, or a
        job's worker): its workers mount it per run."""
        st = super().status(ref)
        seen = self._node_reports(ref.uid)
        nodes = []
        for node in dict.fromkeys([*ref.nodes, *sorted(seen)]):
            held = seen.get(node)
            message = "" if node in ref.nodes else "not one of its nodes: cached by a job that ran here"
            if held is None:
                message = "not warmed up here yet"
            nodes.append(NodeCache(node, held is not None, held or 0, message))
        return dataclasses.replace(st, nodes=tuple(nodes))

    def delete(self, ref: SampleSetRef) -> None:
        """Unmount and destroy the volume (the local backend's delete), then remove its caches on
        every node that reported one (a purge job per node, waited for a bounded time: on a node
        that is down it stays queued and runs when the node is back)."""
        nodes = sorted(set(ref.nodes) | set(self._node_reports(ref.uid)))
        super().delete(ref)
        ids = []
        for node in nodes:
            try:
                ids.append(self._submit(ref, "purge", node, "", "purge", output=Path(os.devnull)))
            except sc.SlurmCommandError as exc:
                log.warning("SampleSet %s: purging its cache on %s: %s", ref.key, node, exc)
        deadline = time.monotonic() + _PURGE_WAIT
        while ids and time.monotonic() < deadline:
            queued = sc.queue(ids, self.settings.command_timeout)
            if all(j.ended for j in queued.values()):
                return
            time.sleep(_POLL)
        if ids:
            log.warning("SampleSet %s: purge jobs %s still queued (a node down?)", ref.key, ids)

    # -- tasks: warmup and clear run on the nodes ---------------------------------------------------

    def _do(self, s: SetRecord, t: TaskRecord) -> None:
        if t.task.kind in (SampleTaskKind.WARMUP, SampleTaskKind.CLEAR):
            self._on_nodes(s, t)
        else:
            super()._do(s, t)

    def _on_nodes(self, s: SetRecord, t: TaskRecord) -> None:
        """One node job per node of the SampleSet, all at once; progress from their reports; fails
        with every failed node's reason."""
        ref, kind = s.ref, t.task.kind.value
        with s.mounting:
            self._format(s)
            self._mount_admin(s)
        files, size = s.volume.usage(self.admin(ref.uid))
        jobs: dict[str, int] = {}
        deadline = time.monotonic() + _QUEUE_WAIT + budget(files, size)
        try:
            for node in ref.nodes:  # a refusal (an unknown node, ...) fails the task: stop the others
                jobs[node] = self._submit(ref, kind, node, t.task.path, t.task.id)
            ended = self._follow(s, t, jobs, deadline)
        except BaseException:  # cancelled (delete, close), out of time, Slurm trouble: stop them
            with contextlib.suppress(sc.SlurmCommandError):
                sc.cancel(list(jobs.values()), self.settings.command_timeout)
            raise
        failed = []
        for node, state in ended.items():
            report = self._read(task_report(self.reports(ref.uid), t.task.id, node))
            if report.get("finished") and report.get("ok"):
                continue
            why = report.get("message") or f"its Slurm job {jobs[node]} ended {state} without a report"
            failed.append(f"{why} (log: {self._log(ref, t.task.id, node)})")
        if failed:
            raise JuiceFSError(f"{kind} failed on {len(failed)} of {len(jobs)} nodes: " + "; ".join(failed))

    def _follow(self, s: SetRecord, t: TaskRecord, jobs: dict[str, int], deadline: float) -> dict[str, str]:
        """Wait for the node jobs to end (bounded), keeping ``t``'s progress; {node: Slurm state}."""
        uid, ended = s.ref.uid, dict[str, str]()
        while len(ended) < len(jobs):
            if s.cancel.is_set():
                raise Cancelled
            if time.monotonic() > deadline:
                waiting = ", ".join(n for n in jobs if n not in ended)
                raise JuiceFSError(f"{t.task.kind.value} did not end in time on {waiting}")
            try:
                queued = sc.queue(jobs.values(), self.settings.command_timeout)
            except sc.SlurmCommandError as exc:  # Slurm busy for now: ask again, within the deadline
                log.warning("SampleSet %s: squeue failed, asking again: %s", s.ref.key, exc)
                time.sleep(_POLL)
                continue
            for node, jid in jobs.items():
                j = queued.get(jid)
                if node not in ended and (j is None or j.ended):
                    ended[node] = j.state if j is not None else "(gone from Slurm)"
            done = total = 0
            for node in jobs:
                report = self._read(task_report(self.reports(uid), t.task.id, node))
                done, total = done + _int(report.get("done")), total + _int(report.get("total"))
            t.done, t.total = (
                (done, total) if t.task.kind == SampleTaskKind.WARMUP else (len(ended), len(jobs))
            )
            if len(ended) < len(jobs):
                time.sleep(_POLL)
        return ended

    def _submit(
        self, ref: SampleSetRef, kind: str, node: str, path: str, task: str, output: Path | None = None
    ) -> int:
        """``sbatch -w NODE`` of one node job; its Slurm id."""
        out = output or self._log(ref, task, node)
        out.parent.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k.startswith("SLURM_CONF")}
        env.update(PATH=os.environ.get("PATH", "/usr/bin:/bin"), LANG=os.environ.get("LANG", "C.UTF-8"))
        return sc.submit(
            self.node_job(ref, kind, node, (path, task), out), env, self.settings.command_timeout
        )

    def node_job(
        self, ref: SampleSetRef, kind: str, node: str, what: tuple[str, str], out: Path
    ) -> list[str]:
        """The sbatch arguments of one node job (``kind``: warmup, clear or purge) on ``node``;
        ``what``: (the path inside the volume, the task's id)."""
        path, task = what
        argv = [*self._node_argv(kind, ref), "--task", task, *(["--path", path] if path else [])]
        return [
            f"--job-name=pc-sampleset-{ref.uid}-{kind}-{node}", f"--comment=paddlecloud-sampleset:{ref.key}",
            f"--nodelist={node}", f"--output={out}", *_NODE_JOB, *self.settings.site_args(ref.owner),
            f"--wrap=exec {shlex.join(argv)}",
        ]  # fmt: skip

    def _node_argv(self, command: str, ref: SampleSetRef) -> list[str]:
        return [
            self.settings.python, "-I", "-m", "paddlecloud.backends.slurm.samplenode", command,
            "--volume", str(self.folder(ref.uid)), "--name", ref.uid,
            "--node-cache", str(self.paths.root), "--cache-size", str(ref.cache_size),
        ]  # fmt: skip

    def _log(self, ref: SampleSetRef, task: str, node: str) -> Path:
        return self.folder(ref.uid) / "logs" / f"{task}.{node}.log"

    def _node_reports(self, uid: str) -> dict[str, int]:
        """{node: cached bytes} of every node that reported this SampleSet."""
        out = {}
        for path in sorted(self.reports(uid).glob("*.json")):
            report = self._read(path)
            if isinstance(report.get("cached_bytes"), int):
                out[str(report.get("node", path.stem))] = _int(report["cached_bytes"])
        return out

    @staticmethod
    def _read(path: Path) -> dict[str, object]:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0
