"""How the local backend keeps each run beyond its sandbox: its job's network, its limits, its log.

    LocalBackend ──Keeper(root, Confiners)──▶ keeper.net_for(key)       the job's namespace name
                                              keeper.open_net(key)      held and made before its first worker
                                              keeper.plan(launch, role) a run's RunPlan (monitor options)
                                              keeper.close_net(key)     the job is done
                                              keeper.collect(live)      what ended unseen goes

Network namespaces are named from the backend's root and the job's key (two servers on one host
never share one) and marked in ``<root>/netns/`` so that ``collect`` finds those of jobs whose end
no server saw (a server stopped for good while they ran): a namespace still holding a process is
never removed; old empty run cgroups go too (``node.cgroups.Hierarchy.collect``).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from paddlecloud.backends.local.isolation import Confiners
from paddlecloud.backends.local.process import RunPlan
from paddlecloud.core.resources import Resources
from paddlecloud.node import netns

__all__ = ["HELPER_NEED", "Keeper", "api_target"]

log = logging.getLogger("paddlecloud.backends.local")

#: what a platform helper run in the job's environment (the rendezvous store) may use
HELPER_NEED = Resources(cpu_m=1000, memory=2**30)


def api_target(url: str) -> str:
    """HOST:PORT of the API at ``url`` ("" when it has none)."""
    parts = urlsplit(url)
    if not parts.hostname:
        return ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{host}:{port}"


@dataclass(frozen=True)
class Keeper:
    root: Path
    confine: Confiners

    @property
    def _marks(self) -> Path:
        return self.root / "netns"

    def net_for(self, key: str) -> str:
        """The job's network namespace ("" : its workers share the host's network)."""
        if not (self.confine.network and self.confine.sandbox is not None):
            return ""
        ident = f"{self.root}\0{key}"
        return netns.name_for(hashlib.sha256(ident.encode()).hexdigest()[:16])

    def open_net(self, key: str) -> int:
        """Hold and make the job's namespace (idempotent; NetnsError when it cannot be made): the
        hold's descriptor (``netns.hold``), for the caller to close once its workers' monitors
        hold it too; -1 when the job has none."""
        name = self.net_for(key)
        if not name:
            return -1
        self._marks.mkdir(exist_ok=True)
        (self._marks / name).touch()
        hold = netns.hold(name)
        try:
            netns.ensure(netns.JobNet(name))
        except BaseException:
            os.close(hold)
            raise
        return hold

    def close_net(self, key: str) -> None:
        name = self.net_for(key)
        if not name:
            return
        try:  # nobody holds it once its workers' monitors are gone (else: collect, later)
            if netns.remove(name, if_unused=True) or not netns.exists(name):
                (self._marks / name).unlink(missing_ok=True)
        except netns.NetnsError as exc:  # left for collect, or the next job of that name
            log.warning("%s: removing its network namespace failed: %s", key, exc)

    def plan(self, key: str, user: str, api_url: str, need: Resources | None) -> RunPlan:
        """How a run of job ``key`` is kept: ``need``'s memory and CPU (None: unlimited), the pids
        limit, the job's network namespace, the API relay, the log cap."""
        cfg = self.confine
        limits = cfg.run_limits(need.memory if need else None, need.cpu_m if need else None)
        name = self.net_for(key)
        return RunPlan(
            cgroups=cfg.cgroups, limits=limits, names=(user, key.partition("/")[2]), netns=name,
            api_target=api_target(api_url) if name else "", max_log_bytes=cfg.limits.max_log_bytes,
        )  # fmt: skip

    @staticmethod
    def need(resources: Mapping[str, Resources], role: str, helper: bool) -> Resources | None:
        """What a worker of ``role`` asked for (a platform helper: ``HELPER_NEED``)."""
        return HELPER_NEED if helper else resources.get(role)

    def collect(self, live: set[str]) -> None:
        """Remove this backend's namespaces with no process inside whose jobs (keys) are not in
        ``live``, and old empty run cgroups."""
        keep = {self.net_for(k) for k in live}
        for mark in self._marks.glob("pcj-*") if self._marks.is_dir() else ():
            if mark.name in keep:
                continue
            try:
                netns.remove(mark.name, if_unused=True)
                if not netns.exists(mark.name):
                    mark.unlink(missing_ok=True)
            except netns.NetnsError as exc:
                log.warning("removing the network namespace %s failed: %s", mark.name, exc)
        if self.confine.cgroups is not None:
            self.confine.cgroups.collect()
