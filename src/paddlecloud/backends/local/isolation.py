"""What this host confines each worker with, chosen once when the backend starts.

    LocalBackend / SlurmBackend ──choose_all(mode, ...)──▶ Confiners
        sandbox   bubblewrap (``sandbox.py``): the files a worker sees
        network   a network namespace per job (``node.netns``): whom a worker can talk to
        cgroups   a cgroup per run (``node.cgroups``): memory, CPU and processes a run may use
        limits    what a run gets besides its --memory and --cpu: the pids limit, the log cap

``--isolation sandbox`` needs all three and says what to change when one is missing
(IsolationError); ``auto`` (the default) takes what this host offers and says, in the words ``up``
prints, what is missing and what that means; ``none`` confines no file access and no network
(every user trusts every other) but still keeps each run within its resources where cgroups work:
limits take nothing from a job it asked for (``up --resource-limits off`` drops them; ``on`` refuses
to start without them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from paddlecloud.backends.errors import IsolationError
from paddlecloud.backends.local.sandbox import Isolation, Sandbox, choose
from paddlecloud.backends.options import OptionError, quantity
from paddlecloud.node import netns
from paddlecloud.node.cgroups import CgroupError, Hierarchy, Limits, RunCgroup, safe_name
from paddlecloud.node.logcap import MIN_LIMIT

__all__ = ["DEFAULT_MAX_LOG_BYTES", "DEFAULT_MAX_PIDS", "Confiners", "RunLimits", "choose_all", "host_pids"]

#: processes and threads one worker run may have (``up --max-pids``)
DEFAULT_MAX_PIDS = 1024
#: bytes of log one worker run keeps (``up --max-log-size``)
DEFAULT_MAX_LOG_BYTES = 100 * 2**20


@dataclass(frozen=True)
class RunLimits:
    """What every run gets besides its own --memory and --cpu."""

    max_pids: int | None = DEFAULT_MAX_PIDS
    max_log_bytes: int | None = DEFAULT_MAX_LOG_BYTES
    #: auto | on | off (``up --resource-limits``): cgroups where they work, required, or none
    resources: str = "auto"

    #: the ``up`` options these limits are made from
    OPTIONS: ClassVar[tuple[str, ...]] = ("max_pids", "max_log_size", "resource_limits")

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> RunLimits:
        """From ``up --max-pids N --max-log-size SIZE|none`` (OptionError for a bad value)."""
        pids = options.get("max_pids")
        size = options.get("max_log_size")
        if size is None:
            log_bytes: int | None = DEFAULT_MAX_LOG_BYTES
        elif size == "none":
            log_bytes = None
        else:
            log_bytes = quantity("memory", size, "--max-log-size")
            if log_bytes is not None and log_bytes < MIN_LIMIT:
                raise OptionError("--max-log-size", f"{size!r}: at least {MIN_LIMIT // 1024}Ki (or 'none')")
        resources = str(options.get("resource_limits") or "auto")
        if resources not in ("auto", "on", "off"):
            raise OptionError("--resource-limits", f"{resources!r}: expected auto, on or off")
        pids_limit = int(pids) if pids is not None else DEFAULT_MAX_PIDS
        return cls(max_pids=pids_limit, max_log_bytes=log_bytes, resources=resources)


@dataclass(frozen=True)
class Confiners:
    sandbox: Sandbox | None
    #: per-job network namespaces (root only)
    network: bool
    cgroups: Hierarchy | None
    isolation: Isolation
    limits: RunLimits = RunLimits()

    @property
    def confined(self) -> bool:
        """A job can reach neither another job's files nor its workers."""
        return self.sandbox is not None and self.network

    def run_limits(self, memory: int | None, cpu_m: int | None) -> Limits:
        return Limits(memory=memory, cpu_m=cpu_m, pids=self.limits.max_pids)

    def run_cgroup(self, names: Sequence[str], limits: Limits) -> RunCgroup | None:
        """The run's cgroup (None without cgroups); CgroupError when it cannot be made."""
        if self.cgroups is None:
            return None
        return self.cgroups.create(safe_name(*names), limits)


def host_pids() -> int:
    """What all runs together may have of processes and threads: three quarters of what the
    host's kernel allows (``kernel.pid_max``, ``kernel.threads-max``), the rest for the host."""
    limits = []
    for name in ("pid_max", "threads-max"):
        try:
            limits.append(int(Path(f"/proc/sys/kernel/{name}").read_text()))
        except (OSError, ValueError):
            continue
    return max(min(limits, default=32768) * 3 // 4, 1024)


def _check_cgroups(root: str | None) -> tuple[Hierarchy | None, str]:
    """The hierarchy and "" when a run's cgroup can be made and removed here, else None and why;
    all runs together are capped at ``host_pids()``."""
    try:
        tree = Hierarchy.detect(root)
        probe = tree.create(safe_name("probe", str(id(tree))), Limits(memory=64 * 2**20, pids=16))
        probe.remove()
        tree.cap_pids(host_pids())
    except CgroupError as exc:
        return None, str(exc)
    except OSError as exc:
        return None, f"cgroups: {exc}"
    return tree, ""


def _limits_words(tree: Hierarchy | None, limits: RunLimits) -> str:
    if tree is None:
        return "no resource limits" + (" (--resource-limits off)" if limits.resources == "off" else "")
    pids = f"{limits.max_pids} processes" if limits.max_pids else "no process limit"
    return f"memory and CPU as asked, {pids} per worker (cgroup v{tree.version})"


def choose_all(
    mode: str, shim: Path, *, gpus: bool, private: Sequence[Path] = (), cgroup_root: str | None = None,
    limits: RunLimits = RunLimits(),
) -> Confiners:  # fmt: skip
    """The confiners for ``mode`` (auto | sandbox | none) on this host; IsolationError when
    ``sandbox`` cannot be had, saying what to change."""
    sandbox, iso = choose(mode, shim, gpus=gpus, private=private)
    missing: list[str] = []
    network = False
    if sandbox is not None:
        why = netns.probe()
        network = why is None
        if why is not None:
            if mode == "sandbox":
                raise IsolationError(
                    f"--isolation sandbox: a network namespace per job cannot be made here: {why}; run the "
                    "server as root, or use --isolation auto (jobs can then connect to each other's ports)"
                )
            missing.append(f"the network is NOT isolated ({why}): any job can connect to other jobs' ports")
    tree, why = (None, "--resource-limits off") if limits.resources == "off" else _check_cgroups(cgroup_root)
    if tree is None and limits.resources != "off":
        if mode == "sandbox" or limits.resources == "on":
            flag = "--isolation sandbox" if mode == "sandbox" else "--resource-limits on"
            raise IsolationError(
                f"{flag}: no resource limits can be set here: {why}; give up --cgroup-root a delegated "
                "cgroup, or use --resource-limits off (jobs may then use more than they asked for)"
            )
        missing.append(f"resources are NOT limited ({why})")
    parts = [iso.detail]
    if network:
        parts.append("a network namespace per job (its workers reach each other and the API, nothing else)")
    parts.append(_limits_words(tree, limits))
    if limits.max_log_bytes:
        parts.append(f"logs kept within {limits.max_log_bytes // 2**20} MiB per run")
    words = "; ".join(parts + missing)
    return Confiners(sandbox, network, tree, Isolation(iso.mode, words), limits)
