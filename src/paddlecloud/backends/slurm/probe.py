"""At start-up: do the Slurm nodes see the backend's shared directory?

Every worker's log, status, package and environment live in the backend's root (``<data>/slurm``)
at the same path on every node: a root the nodes cannot see (a folder on the server's own disk,
the default ``~/.paddlecloud``) made every worker vanish with no exit status, the cause only in a
node's ``slurmd.log`` ("Could not open stdout file"). So ``up`` checks first:

    create(setup) ──check_shared_dir(settings)──▶ the usable nodes (``sinfo``)
        ──shared_dir_seen(root, nodes)──▶ a token file written under <root>/probe/
        └─ one ``srun`` per probed node (``--nodelist``, 1 CPU, 16M, ``--immediate``: never waits for
           a busy node) running ``cat`` of that file, all at once, each bounded
    ◀── Probe: the nodes that read the token back, the nodes that ran ``cat`` and could not
        (the directory is not there: ``BackendConfigError`` naming them and what to change), and
        the nodes that could not be asked (busy, down, no account: a warning in the server's log)

At most :data:`MAX_NODES` nodes are probed (the first usable ones by name): a cluster whose nodes
mount the cluster file system differently is then caught only where one of those is affected.
"""

from __future__ import annotations

import logging
import re
import secrets
import shutil
import subprocess
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from paddlecloud.backends.registry import BackendConfigError
from paddlecloud.backends.slurm.commands import SlurmCommandError, cluster_nodes
from paddlecloud.backends.slurm.settings import SlurmSettings

__all__ = ["MAX_NODES", "Probe", "check_shared_dir", "shared_dir_seen"]

log = logging.getLogger(__name__)

#: nodes probed at most (each an ``srun`` at once)
MAX_NODES = 8
_CAT = re.compile(r"^(\S*/)?cat: ")
#: seconds Slurm may take to give a probe its CPU (``--immediate``), and to run it
_IMMEDIATE_S = 10
_RUN_S = 30


@dataclass(frozen=True)
class Probe:
    seen: tuple[str, ...] = ()
    #: node -> what ``cat`` said there (the file is not at that path on the node)
    unseen: dict[str, str] = field(default_factory=dict)
    #: node -> why it could not be asked (Slurm's words)
    unknown: dict[str, str] = field(default_factory=dict)


def _ask(node: str, token_file: Path, token: str, extra: Sequence[str]) -> tuple[str, str, str]:
    """(node, "seen" | "unseen" | "unknown", detail) for one node."""
    argv = ["srun", f"--nodelist={node}", "--nodes=1", "--ntasks=1", "--cpus-per-task=1", "--mem=16M",
            f"--immediate={_IMMEDIATE_S}", "--time=1", "--chdir=/", "--job-name=paddlecloud-probe",
            "--quiet", *extra, "cat", str(token_file)]  # fmt: skip
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=_IMMEDIATE_S + _RUN_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return node, "unknown", str(exc)
    if r.returncode == 0 and r.stdout.strip() == token:
        return node, "seen", ""
    said = (r.stderr.strip() or r.stdout.strip() or f"srun exit status {r.returncode}").splitlines()
    ran = [line for line in said if _CAT.match(line)]  # ``cat:`` or ``/usr/bin/cat:``: it ran there
    if ran:  # and the file was not there
        return node, "unseen", ran[0]
    return node, "unknown", said[-1][:300]


def shared_dir_seen(root: Path, nodes: Sequence[str], extra: Sequence[str] = ()) -> Probe:
    """Probe up to :data:`MAX_NODES` of ``nodes`` (names of usable nodes) for ``root``; ``extra``:
    more ``srun`` arguments (the site's partition and account)."""
    probed = sorted(nodes)[:MAX_NODES]
    if not probed:
        return Probe()
    folder = root / "probe"
    folder.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    token_file = folder / f"{token}.txt"
    token_file.write_text(token + "\n")
    try:
        with ThreadPoolExecutor(len(probed), thread_name_prefix="slurm-probe") as pool:
            answers = list(pool.map(lambda n: _ask(n, token_file, token, extra), probed))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    seen = tuple(n for n, verdict, _ in answers if verdict == "seen")
    unseen = {n: d for n, verdict, d in answers if verdict == "unseen"}
    unknown = {n: d for n, verdict, d in answers if verdict == "unknown"}
    for node, why in unknown.items():
        log.warning("could not check that Slurm node %s sees %s: %s", node, root, why)
    return Probe(seen, unseen, unknown)


def check_shared_dir(settings: SlurmSettings) -> None:
    """Raise ``BackendConfigError`` naming the nodes when a probed node cannot see the backend's
    root; a node that could not be asked, or no node list at all, is only logged."""
    root = Path(settings.root or ".").resolve()
    try:
        nodes = [n.name for n in cluster_nodes(settings.command_timeout, settings.partition) if n.usable]
    except SlurmCommandError as exc:  # the backend says so at its first call too
        log.warning("could not list the Slurm nodes to check that they see %s: %s", root, exc)
        return
    site = [f"--partition={settings.partition}"] if settings.partition else []
    found = shared_dir_seen(root, nodes, [*site, *([f"--qos={settings.qos}"] if settings.qos else [])])
    if found.unseen:
        names = ", ".join(sorted(found.unseen))
        said = next(iter(found.unseen.values()))
        raise BackendConfigError(
            f"Slurm node{'s' if len(found.unseen) > 1 else ''} {names} cannot see {root} ({said}): every "
            "worker's package, log and status live there, at the same path on every node. Give a "
            "--data-dir on the cluster file system that every node mounts at the same path (docs/slurm.md)"
        )
