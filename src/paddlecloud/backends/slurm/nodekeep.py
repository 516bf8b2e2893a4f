"""How a Slurm node keeps one worker run beyond its sandbox: the job's network, pids, log, API.

    server  BatchScripts ──RunKeep(...)──▶ JailSpec.keep (JSON, in the run's jail spec)
    node    jail.main ──RunKeep.prepare(node)──▶ the job's network namespace on this host (made if
            missing: ``node.netns``, with the job's VXLAN to the other hosts), a pids cgroup for
            the run (``node.cgroups``, v1 hosts), and the command line of the run's monitor
            (``node.monitor``) up to the sandbox's: the jail then execs it

Slurm owns the run's memory and CPU (``task/cgroup``, ``--mem``, ``--cpus-per-task``); the monitor
adds what Slurm lacks: a pids limit, the run's end on a node cut off from the cluster
(``fence_api``: ``node.fence``), the log cap (it writes the run's log, which is also sbatch's
``--output``), the API relay (the job's namespace has no route out: the API is a Unix socket on
this node, relayed to the server's address) and, for a server (pserver, rendezvous store), the
ready mark the backend waits for (it cannot connect into the namespace to see it listen).

The network: one namespace per job per host, ``pcs-<id>``, shared by the job's workers on that
host. Where this host has an address the other nodes reach (Slurm's ``NodeAddr``, not loopback),
the namespace gets the job's VXLAN (``Vxlan``: its VNI, this host's address, flood entries to the
other nodes'): workers address each other by their nodes' addresses as before, and those lead over
the job's own segment inside the namespace. Nodes that share one host (the emulated test cluster)
share one namespace: loopback. The last monitor of the job on a host removes the namespace
(``--release-netns``); one left by a killed node is collected by the next run's ``prepare``.

Needs root on the node (the batch step runs as root here; a real site does this in a root Prolog:
docs/slurm.md). Standard library and ``paddlecloud.node`` only: it runs at every worker start.
"""

from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from paddlecloud.core.netaddr import is_loopback
from paddlecloud.node import apirelay, monitor
from paddlecloud.node import netns as namespaces
from paddlecloud.node.cgroups import CgroupError, Hierarchy, Limits, safe_name

__all__ = ["NETNS_PREFIX", "RunKeep"]

#: the prefix of the Slurm backend's job namespaces (``collect`` touches only these)
NETNS_PREFIX = "pcs-"


@dataclass(frozen=True)
class RunKeep:
    """One run's keeping, as the server describes it to the node (``JailSpec.keep``)."""

    #: the run's log file (also sbatch's --output: what precedes the monitor lands there too)
    log: str
    max_log_bytes: int | None = None
    max_pids: int | None = None
    #: the job's network namespace on each host ("" : the node's network) and its VXLAN's VNI
    netns: str = ""
    vni: int = 0
    #: every node's address (Slurm's NodeAddr), by node name: this host's own and the flood list
    addresses: dict[str, str] = field(default_factory=dict)
    #: HOST:PORT of the API, relayed into the namespace through a socket in ``api_dir``
    api_target: str = ""
    api_dir: str = ""
    #: a server's port and the mark its monitor writes once it listens there (0: not a server)
    ready_port: int = 0
    ready_file: str = ""
    #: the run ends itself when this node hears neither the API (HOST:PORT) nor the Slurm
    #: controller for ``fence_after_s`` (``node.fence``; 0: never)
    fence_api: str = ""
    fence_after_s: int = 0
    #: ``scontrol``'s absolute path on the nodes (as the server has it; "" : no fence)
    fence_scontrol: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Any) -> RunKeep:
        """From ``to_dict`` (ValueError when ``raw`` is not one)."""
        if not isinstance(raw, dict) or not isinstance(raw.get("log"), str):
            raise ValueError("keep: not a run's keeping")
        known = {f: raw[f] for f in cls.__dataclass_fields__ if f in raw}
        addresses = known.get("addresses", {})
        if not isinstance(addresses, dict) or not all(isinstance(v, str) for v in addresses.values()):
            raise ValueError("keep: addresses is not a map of node names to addresses")
        for name in ("max_log_bytes", "max_pids", "vni", "ready_port", "fence_after_s"):
            if known.get(name) is not None and not isinstance(known[name], int):
                raise ValueError(f"keep: {name} is not a number")
        return cls(**known)

    # -- on the node -------------------------------------------------------------------------

    def api_socket(self, run: str) -> str:
        return str(Path(self.api_dir) / f"api-{run}.sock") if self.api_target and self.api_dir else ""

    def _net(self, node: str) -> namespaces.JobNet:
        own = self.addresses.get(node, "")
        peers = tuple(sorted({a for a in self.addresses.values() if a != own and not is_loopback(a)}))
        if self.vni and own and not is_loopback(own) and peers:
            return namespaces.JobNet(self.netns, namespaces.Vxlan(self.vni, own, peers))
        return namespaces.JobNet(self.netns)

    def _pids(self, run: str) -> list[str]:
        """A pids cgroup for the run on a v1 host (cgroup v2: Slurm's job cgroup is the run's, and
        a process leaving it would leave Slurm's limits: none then, said in the log)."""
        if not self.max_pids:
            return []
        try:
            tree = Hierarchy.detect()
            if tree.version != 1:
                print("paddlecloud: no pids limit here (cgroup v2: Slurm's own cgroup)", file=sys.stderr)
                return []
            tree.collect(older_than=60.0)
            cg = tree.create(safe_name("slurm", run), Limits(pids=self.max_pids), controllers=("pids",))
        except CgroupError as exc:
            print(f"paddlecloud: no pids limit on this node: {exc}", file=sys.stderr)
            return []
        return [str(p) for p in cg.paths]

    def prepare(self, node: str, run: str, status: str) -> list[str]:
        """Set up this run on this node (``node``: Slurm's name of it, ``run``: a name unique to the
        run); the monitor's command line, ending where the sandbox's begins. namespaces.NetnsError when
        the job's namespace cannot be made here."""
        argv = [*monitor.command(), "--log", self.log, "--status", status]
        if self.max_log_bytes:
            argv += ["--max-log-bytes", str(self.max_log_bytes)]
        for folder in self._pids(run):
            argv += ["--cgroup", folder]
        if self.ready_port and self.ready_file:
            argv += ["--ready-port", str(self.ready_port), "--ready-file", self.ready_file]
        if self.fence_api and self.fence_scontrol and self.fence_after_s > 0:
            argv += ["--fence-api", self.fence_api, "--fence-scontrol", self.fence_scontrol,
                     "--fence-after", str(self.fence_after_s)]  # fmt: skip
        enter: list[str] = []
        if self.netns:
            namespaces.collect(NETNS_PREFIX, older_than=60.0)
            hold = namespaces.hold(self.netns)  # kept by the monitor (through the jail's exec)
            os.set_inheritable(hold, True)
            namespaces.ensure(self._net(node))
            argv += ["--hold-fd", str(hold), "--release-netns", self.netns]
            enter = namespaces.enter_argv(self.netns)
            path = self.api_socket(run)
            if path:  # made here, inherited by the monitor through the jail's exec
                os.makedirs(self.api_dir, exist_ok=True)
                sock = apirelay.listen(path)
                os.set_inheritable(sock.fileno(), True)
                argv += ["--api-fd", str(sock.detach()), "--api-target", self.api_target, "--remove", path]
        return [*argv, "--", *enter]
