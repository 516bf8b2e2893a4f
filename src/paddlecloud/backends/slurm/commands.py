"""The Slurm commands the backend uses, with their JSON output: ``sbatch``, ``squeue --json``,
``sinfo --json``, ``scancel``.

    backend ──submit(argv, env)──▶ sbatch --parsable ──▶ Slurm job id
            ──queue(ids)─────────▶ squeue --json (one call for all) ──▶ {id: SlurmJob}
            ──cluster_nodes()────▶ sinfo --json ──▶ nodes with capacity, allocation and state
            ──cancel(ids, TERM)──▶ scancel --signal=TERM --full, later scancel (SIGKILL after KillWait)

The commands are found on ``PATH`` and read ``SLURM_CONF`` from the environment like any Slurm
client. A command that fails or hangs raises :class:`SlurmCommandError` with its stderr.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from paddlecloud.backends.errors import BackendUnavailable
from paddlecloud.core.quantity import human_memory

__all__ = [
    "ControllerInfo", "SlurmCommandError", "SlurmJob", "SlurmNode", "cancel", "cluster_nodes", "controller",
    "holders", "oom_message", "queue", "running", "submit",
]  # fmt: skip

#: Slurm job states after which the job's processes are gone
ENDED_STATES = frozenset(
    {
        "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
        "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT",
    }
)  # fmt: skip


class SlurmCommandError(BackendUnavailable):
    """A Slurm command failed or took too long; the message has the command and its error
    (transient: slurmctld busy, restarting or unreachable; the controller tries again)."""


@dataclass(frozen=True)
class SlurmJob:
    id: int
    name: str
    state: str  # PENDING, RUNNING, COMPLETED, NODE_FAIL, ...
    reason: str  # why it is pending or ended (``state_reason``), "None" when there is none
    nodes: str  # where it runs: "n2"
    exit_code: int | None
    user: str = ""
    cpus: int = 0
    comment: str = ""
    #: the nodes it holds (``job_resources``: empty while pending)
    node_names: tuple[str, ...] = ()

    @property
    def ended(self) -> bool:
        return self.state in ENDED_STATES

    @property
    def out_of_memory(self) -> bool:
        """Slurm ended it for its memory: with ``task/cgroup`` and ``ConstrainRAMSpace`` the job's
        cgroup is limited to its ``--mem``, the kernel OOM-kills inside it past that, and Slurm then
        reports the job ``OUT_OF_MEMORY`` (whatever the batch script's exit code)."""
        return self.state == "OUT_OF_MEMORY"


def oom_message(memory: int, job: SlurmJob) -> str:
    """What a worker whose Slurm job ended ``OUT_OF_MEMORY`` is told (``WorkerStatus.message``):
    its limit, ``memory`` bytes (``submit --memory``, asked for as ``--mem`` in whole MiB), and where."""
    mib = max(1, math.ceil(memory / 2**20))
    where = f" on {job.nodes}" if job.nodes else ""
    return (
        f"memory limit {human_memory(memory)} (Slurm --mem={mib}M): killed by the kernel for using more "
        f"(Slurm job {job.id} OUT_OF_MEMORY{where})"
    )


@dataclass(frozen=True)
class SlurmNode:
    name: str
    address: str
    state: str  # idle, mixed, allocated, down, drained, ...
    flags: tuple[str, ...]  # DRAIN, NOT_RESPONDING, ...
    cpus: int
    alloc_cpus: int
    memory_mib: int
    alloc_memory_mib: int
    gpus: int
    reason: str
    alloc_gpus: int = 0

    @property
    def usable(self) -> bool:
        bad = {"DRAIN", "DRAINING", "DRAINED", "NOT_RESPONDING", "FAIL", "MAINTENANCE", "POWERED_DOWN"}
        return self.state not in ("down", "drained", "draining", "fail", "unknown") and not bad & set(
            self.flags
        )


def _run(argv: list[str], timeout: float, env: Mapping[str, str] | None = None) -> str:
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, check=False, env=env,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise SlurmCommandError(f"{argv[0]} took over {timeout:.0f} s") from None
    except OSError as exc:
        raise SlurmCommandError(f"{argv[0]}: {exc} (is Slurm installed on the server's host?)") from None
    if proc.returncode != 0:
        raise SlurmCommandError(f"{' '.join(argv[:2])}: {proc.stderr.strip() or f'exit {proc.returncode}'}")
    return proc.stdout


def submit(argv: list[str], env: Mapping[str, str], timeout: float) -> int:
    """``sbatch --parsable ARGV`` with the worker's environment (exported to the job); its id.
    ``sbatch`` is found on the server's ``PATH``, not the worker's (a sandbox's is the system's)."""
    out = _run([shutil.which("sbatch") or "sbatch", "--parsable", *argv], timeout, env).strip()
    try:
        return int(out.split(";")[0])
    except ValueError:
        raise SlurmCommandError(f"sbatch printed {out!r}, not a job id") from None


def _exit_code(raw: Any) -> int | None:
    if isinstance(raw, int):
        return raw
    if isinstance(raw, dict):  # newer Slurm: {"status": ..., "return_code": n}
        rc = raw.get("return_code")
        return rc if isinstance(rc, int) else None
    return None


def _state(raw: Any) -> str:
    return str(raw[0] if isinstance(raw, list) and raw else raw)


def _job(j: dict[str, Any]) -> SlurmJob:
    return SlurmJob(
        id=int(j.get("job_id", -1)),
        name=str(j.get("name", "")),
        state=_state(j.get("job_state", "")),
        reason=str(j.get("state_reason", "")),
        nodes=str(j.get("nodes", "")),
        exit_code=_exit_code(j.get("exit_code")),
        user=str(j.get("user_name", "")),
        cpus=int(j.get("cpus", 0) or 0),
        comment=str(j.get("comment", "") or ""),
        node_names=tuple(
            str(n.get("nodename", ""))
            for n in ((j.get("job_resources") or {}).get("allocated_nodes") or [])
            if isinstance(n, dict)
        ),
    )


def running(timeout: float) -> list[SlurmJob]:
    """Every running job of the cluster, with the nodes it holds (one ``squeue --json``)."""
    data = json.loads(_run(["squeue", "--json"], timeout))
    return [j for j in map(_job, data.get("jobs", [])) if j.state == "RUNNING"]


def queue(ids: Iterable[int], timeout: float) -> dict[int, SlurmJob]:
    """The jobs among ``ids`` that Slurm still knows (ended ones for ``MinJobAge`` seconds)."""
    wanted = set(ids)
    if not wanted:
        return {}
    data = json.loads(_run(["squeue", "--json"], timeout))
    jobs = (_job(j) for j in data.get("jobs", []))
    return {j.id: j for j in jobs if j.id in wanted}


def _gpus(gres: str) -> int:
    """``gpu:2``, ``gpu:a100:2(S:0-1)`` or, in use, ``gpu:1(IDX:0)`` → 2, 2, 1 (0: no GPU GRES)."""
    total = 0
    for item in filter(None, gres.split(",")):
        parts = item.split("(")[0].split(":")
        if parts[0] == "gpu" and parts[-1].isdigit():
            total += int(parts[-1])
    return total


def _node(n: dict[str, Any]) -> SlurmNode:
    return SlurmNode(
        name=str(n["name"]),
        address=str(n.get("address") or n["name"]),
        state=_state(n.get("state", "")).lower(),
        flags=tuple(map(str, n.get("state_flags", []))),
        cpus=int(n.get("cpus", 0)),
        alloc_cpus=int(n.get("alloc_cpus", 0)),
        memory_mib=int(n.get("real_memory", 0)),
        alloc_memory_mib=int(n.get("alloc_memory", 0)),
        gpus=_gpus(str(n.get("gres", ""))),
        reason=str(n.get("reason", "")),
        alloc_gpus=_gpus(str(n.get("gres_used", ""))),
    )


@dataclass(frozen=True)
class ControllerInfo:
    """Where the nodes reach Slurm (``scontrol show config``): the controllers' addresses and port,
    slurmd's port, and how long a node may not answer before Slurm counts it down."""

    addresses: tuple[str, ...]
    port: int
    slurmd_port: int
    slurmd_timeout_s: int


def parse_config(text: str) -> ControllerInfo:
    """``scontrol show config``'s ``Key = value`` lines (``SlurmctldHost[0] = head(10.79.0.1)``,
    ``SlurmctldPort = 6817`` or a range ``6817-6818``, ``SlurmdTimeout = 300 sec``)."""
    conf: dict[str, str] = {}
    hosts: list[str] = []
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key.startswith("SlurmctldHost["):
            name, _, addr = value.partition("(")
            hosts.append(addr.rstrip(")") or name)
        conf[key] = value

    def number(key: str, default: int) -> int:
        digits = conf.get(key, "").split("-")[0].split()[0] if conf.get(key) else ""
        return int(digits) if digits.isdigit() else default

    return ControllerInfo(tuple(hosts), number("SlurmctldPort", 6817), number("SlurmdPort", 6818),
                          number("SlurmdTimeout", 300))  # fmt: skip


def controller(timeout: float) -> ControllerInfo:
    """Where the nodes reach Slurm (``scontrol show config``)."""
    return parse_config(_run(["scontrol", "show", "config"], timeout))


def cluster_nodes(timeout: float, partition: str = "") -> list[SlurmNode]:
    """Every node (of ``partition`` when given) with what it has and what is allocated on it."""
    data = json.loads(_run(["sinfo", "--json"], timeout))
    nodes = data.get("nodes", [])
    return [_node(n) for n in nodes if not partition or partition in n.get("partitions", [])]


def holders(node: str, timeout: float) -> list[str]:
    """Who holds ``node`` now: ``bob's job 12 (big, 3 CPUs)`` per running job, for why-pending messages."""
    out = _run(["squeue", "-h", "-t", "RUNNING", "-w", node, "-o", "%u|%i|%j|%C"], timeout)
    found = []
    for line in out.splitlines():
        user, jid, name, cpus = [*line.split("|"), "", "", ""][:4]
        found.append(f"{user}'s job {jid} ({name}, {cpus} CPUs)")
    return found


def cancel(ids: Iterable[int], timeout: float, signal: str | None = None) -> None:
    """``scancel``: with ``signal``, send it to every process of the jobs (the batch shell and its
    children, ``--full``) and leave them running; without, end them (SIGTERM, KillWait, SIGKILL)."""
    todo = [str(i) for i in ids]
    if not todo:
        return
    argv = ["scancel", *([f"--signal={signal}", "--full"] if signal else []), *todo]
    try:
        _run(argv, timeout)
    except SlurmCommandError as exc:
        if "Invalid job id" not in str(exc) and "already completing" not in str(exc):
            raise
