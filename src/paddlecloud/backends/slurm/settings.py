"""The Slurm backend's settings (``paddlecloud up --backend slurm --slurm-...``).

Made by the backend registry (``backends.registry``) from ``up``'s ``--slurm-*`` options; the
platform's own configuration holds them as an opaque object and hands them back to
:func:`~paddlecloud.backends.slurm.backend.create`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from paddlecloud.backends.local.isolation import RunLimits
from paddlecloud.backends.options import OptionError, cache_size, insecure_registries, isolation_mode

__all__ = ["SlurmSettings"]


@dataclass(frozen=True)
class SlurmSettings:
    #: the backend's files (job packages, logs, exit statuses, records): must be on a file system
    #: every Slurm node sees at the same path (None: the data dir's ``slurm/``)
    root: Path | None = None
    partition: str = ""  # sbatch --partition ("" : the cluster's default partition)
    #: sbatch --account ("" : the submitting Unix user's default account); ``{user}`` in it is the
    #: platform user, so ``pc-{user}`` charges each user's jobs to an account of their own and
    #: Slurm's fair share and accounting see the real users (docs/slurm.md)
    account: str = ""
    qos: str = ""  # sbatch --qos
    #: more sbatch arguments, given as they are to every submission (e.g. ``--constraint=ib``)
    sbatch_args: tuple[str, ...] = ()
    #: the ports workers listen on, unique across every worker the server runs (emulated nodes share
    #: one host; on a real cluster it keeps a job's ports clear of each other's)
    ports: tuple[int, int] = (21000, 28999)
    #: the interpreter that runs ``paddlecloud.runtime.launcher`` on the nodes (the server's own:
    #: it must exist at the same path on every node)
    python: str = sys.executable
    #: seconds between SIGTERM and SIGKILL when the backend itself stops workers
    cleanup_grace: float = 5.0
    #: cap of the environments built from packages' requirements.txt (``<root>/envs``; None: none)
    env_cache_bytes: int | None = 20 * 2**30
    #: seconds a Slurm command may take before the call is given up (the controller retries)
    command_timeout: float = 30.0
    #: auto | sandbox | none: each worker in a bubblewrap sandbox made on its node (``jail.py``;
    #: auto: where bubblewrap works on the server's host), or unconfined (docs/security.md)
    isolation: str = "auto"
    #: node-local folder for SampleSets (``samplenode.py``): each node's block caches under
    #: ``nodes/<node>/`` and each worker run's mount under ``runs/``. An absolute path on every
    #: node's own disk that outlives jobs (not a per-job ``$TMPDIR``); ``<node>`` keeps emulated
    #: nodes that share one host apart (docs/slurm.md)
    node_cache: Path = Path("/var/cache/paddlecloud")
    #: what the node keeps for each sandboxed run besides Slurm's memory and CPU limits: the pids
    #: limit, the log cap (``--max-pids``, ``--max-log-size``; ``nodekeep.py``)
    limits: RunLimits = field(default_factory=RunLimits)
    #: seconds a sandboxed run may hear neither the server nor the Slurm controller before it
    #: ends itself (a node cut off, whose workers the platform restarts elsewhere: ``node.fence``);
    #: None: half of Slurm's ``SlurmdTimeout`` (at least 5), 0: never
    fence_after_s: int | None = None
    #: registries pulled from over plain HTTP (``--insecure-registry``; loopback ones always are)
    insecure_registries: tuple[str, ...] = ()
    #: cap of the pulled and unpacked images (``--image-cache-size``; None: no cap)
    image_cache_bytes: int | None = 50 * 2**30

    #: the ``up`` options these settings are made from
    OPTIONS: ClassVar[tuple[str, ...]] = (
        "slurm_partition", "slurm_account", "slurm_qos", "slurm_sbatch_arg", "isolation",
        "slurm_node_cache", "slurm_ports", "slurm_fence_after", "insecure_registry", "image_cache_size",
        *RunLimits.OPTIONS,
    )  # fmt: skip

    def __post_init__(self) -> None:
        try:
            self.account_of("x")
        except (KeyError, IndexError, ValueError):
            raise OptionError(
                "--slurm-account", f"{self.account!r}: the only placeholder it may hold is {{user}}"
            ) from None
        if not self.node_cache.is_absolute() or "$" in str(self.node_cache):
            raise OptionError(
                "--slurm-node-cache",
                f"{str(self.node_cache)!r}: give an absolute path that every node has on its own disk "
                "(no variables: the server names the same path on every node)",
            )

    def account_of(self, user: str) -> str:
        """The Slurm account a platform user's jobs are charged to ("" : the default)."""
        return self.account.format(user=user)

    def site_args(self, user: str) -> list[str]:
        """The sbatch arguments every submission for ``user`` carries: partition, account, QOS and
        the site's own (``--slurm-sbatch-arg``)."""
        return [
            *([f"--partition={self.partition}"] if self.partition else []),
            *([f"--account={self.account_of(user)}"] if self.account else []),
            *([f"--qos={self.qos}"] if self.qos else []),
            *self.sbatch_args,
        ]

    @classmethod
    def from_options(cls, options: Mapping[str, Any]) -> SlurmSettings:
        return cls(
            partition=options.get("slurm_partition") or "",
            account=options.get("slurm_account") or "",
            qos=options.get("slurm_qos") or "",
            sbatch_args=tuple(options.get("slurm_sbatch_arg") or ()),
            isolation=isolation_mode(options.get("isolation")),
            node_cache=Path(options.get("slurm_node_cache") or cls.node_cache),
            ports=_port_range(options.get("slurm_ports") or ""),
            limits=RunLimits.from_options(options),
            fence_after_s=_fence_after(options.get("slurm_fence_after") or ""),
            insecure_registries=insecure_registries(options.get("insecure_registry")),
            image_cache_bytes=cache_size(
                options.get("image_cache_size"), cls.image_cache_bytes, "--image-cache-size"
            ),
        )


def _fence_after(text: str) -> int | None:
    """``--slurm-fence-after``: seconds (1 to 86400), ``off`` (0), or "" (None: from Slurm)."""
    if not text:
        return None
    if text == "off":
        return 0
    if not text.isdigit() or not 1 <= int(text) <= 86400:
        raise OptionError(
            "--slurm-fence-after",
            f"{text!r}: give seconds (1 to 86400) or off; the default is half of SlurmdTimeout",
        )
    return int(text)


#: the fewest ports a range may hold: a few jobs' workers and stores
MIN_PORTS = 16


def _port_range(text: str) -> tuple[int, int]:
    """``LO-HI`` (``--slurm-ports``) as a range of at least :data:`MIN_PORTS` unprivileged ports;
    "" : the default."""
    if not text:
        return SlurmSettings.ports
    lo, sep, hi = text.partition("-")
    try:
        first, last = int(lo), int(hi)
    except ValueError:
        first = last = 0
    if not sep or not 1024 <= first <= last <= 65535 or last - first + 1 < MIN_PORTS:
        raise OptionError(
            "--slurm-ports",
            f"{text!r}: give LO-HI, at least {MIN_PORTS} ports between 1024 and 65535 that every node "
            "keeps free for workers (e.g. 21000-28999, the default)",
        )
    return first, last
