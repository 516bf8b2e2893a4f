"""Fixtures of the multi-host test bed (``scripts/ensure-hosts.sh``): hosts ``head``, ``c1``..``c3``
and ``laptop`` on this machine, each in network, UTS and mount namespaces of its own on a private
bridge, with Slurm on them (slurmctld on head, a slurmd per compute host).

    bed       session-scoped: ``ensure-hosts.sh wheels`` (the examples' requirements, downloaded on
              this machine: hosts have no route out) and ``ensure-hosts.sh start``, its exports
              parsed; a :class:`Bed` to run commands on hosts. Stopped at the end of the session
              (every process, namespace and mount of the bed gone, which the fixture checks) unless
              the bed was running before the session, which leaves it as it was found
    platform  module-scoped (``tests/hosts/platform.py``): ``paddlecloud up --backend slurm`` on
              head, listening on head's address, data on the bed's shared directory; the CLI on the
              laptop, logged in over HTTP

Where the bed cannot exist (not root: namespaces, a bridge) the tests are skipped with that reason;
any other failure to start it fails them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.slurm.conftest import parse_exports

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "ensure-hosts.sh"
#: the longest ensure-hosts.sh start may take (a fresh machine: apt-get install included)
START_TIMEOUT_S = 600
#: the examples whose environments the bed's hosts build (offline, from the bed's wheel folder)
REQUIREMENTS = tuple(
    ROOT / "examples" / name / "requirements.txt" for name in ("fit_a_line", "torch_ddp", "paddle_collective")
)
COMPUTE = ("c1", "c2", "c3")
#: how the network namespaces the tests make inside hosts are named (tests/hosts/test_bed.py)
BED_NETNS = ("pcbed", "pcvx")


def _sh(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False,
        env={**os.environ, "PADDLECLOUD_HOSTS_PYTHON": sys.executable},
    )  # fmt: skip


@dataclass(frozen=True)
class Bed:
    """The running bed: its exports and the hosts' addresses; commands run on a host with
    ``ensure-hosts.sh exec`` (in the host's namespaces, the caller's environment and cwd)."""

    env: dict[str, str]
    addresses: dict[str, str]

    @property
    def shared(self) -> Path:
        """The cluster file system: the same folder on every host but the laptop, and here."""
        return Path(self.env["PADDLECLOUD_HOSTS_SHARED"])

    def environ(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        """What a command on a host starts with: this process's environment without PaddleCloud's
        settings (a server or CLI here, a single-host cluster's), the bed's exports, ``extra``."""
        mine = {k: v for k, v in os.environ.items() if not k.startswith("PADDLECLOUD_") and k != "SLURM_CONF"}
        return {**mine, **self.env, **(extra or {})}

    def argv(self, host: str, *cmd: str) -> list[str]:
        return ["bash", str(SCRIPT), "exec", host, *cmd]

    def run(
        self, host: str, *cmd: str, timeout: float = 60, check: bool = True, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            self.argv(host, *cmd), capture_output=True, text=True, timeout=timeout, check=False,
            env=self.environ(env),
        )  # fmt: skip
        if check:
            what = f"on {host}: {' '.join(cmd)}: rc {proc.returncode}"
            assert proc.returncode == 0, f"{what}\n{proc.stdout}{proc.stderr}"
        return proc

    def out(self, host: str, *cmd: str, timeout: float = 60) -> str:
        return self.run(host, *cmd, timeout=timeout).stdout


def _hosts() -> dict[str, str]:
    proc = _sh("hosts")
    assert proc.returncode == 0, proc.stderr
    return dict(line.split() for line in proc.stdout.splitlines())


def _machine_netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _bed_environ() -> list[int]:
    """Processes whose environment says they were started on a host of this bed (``exec`` sets
    PADDLECLOUD_HOST and PADDLECLOUD_HOSTS_DIR) or are one of its keepers."""
    bed_dir = os.environ.get("PADDLECLOUD_HOSTS_DIR", "/var/lib/paddlecloud-hosts")
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            entries = environ.read_bytes().split(b"\0")
        except OSError:
            continue
        on_host = f"PADDLECLOUD_HOSTS_DIR={bed_dir}".encode() in entries and any(
            e.startswith(b"PADDLECLOUD_HOST=") for e in entries
        )
        if on_host or any(e.startswith(f"PADDLECLOUD_HOSTS_KEEPER={bed_dir}:".encode()) for e in entries):
            found.append(int(environ.parent.name))
    return found


def bed_processes() -> list[str]:
    """Every process the bed's hosts hold ("HOST PID COMMAND"), its keepers aside."""
    proc = _sh("procs")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.splitlines()


@pytest.fixture(scope="session")
def bed() -> Iterator[Bed]:
    if os.geteuid() != 0:
        pytest.skip("the multi-host test bed needs root (network, UTS and mount namespaces, a bridge)")
    already = _sh("status").returncode == 0
    netns_before = _machine_netns()
    t0 = time.monotonic()
    wheels = _sh("wheels", *map(str, REQUIREMENTS), timeout=START_TIMEOUT_S)
    assert wheels.returncode == 0, f"ensure-hosts.sh wheels failed:\n{wheels.stderr}"
    t1 = time.monotonic()
    proc = _sh("start", timeout=START_TIMEOUT_S)
    assert proc.returncode == 0, f"ensure-hosts.sh start failed:\n{proc.stderr}"
    how = "it was running" if already else "a new one"
    print(f"\nbed: wheels {t1 - t0:.1f} s, start {time.monotonic() - t1:.1f} s ({how})")
    env = parse_exports(proc.stdout)
    assert {"PADDLECLOUD_HOSTS_SHARED", "SLURM_CONF"} <= set(env), proc.stdout
    try:
        yield Bed(env, _hosts())
    finally:
        if not already:
            t0 = time.monotonic()
            stop = _sh("stop", timeout=300)
            print(f"\nbed: stop {time.monotonic() - t0:.1f} s")
            assert stop.returncode == 0, stop.stderr
            assert _sh("status").returncode != 0
            assert bed_processes() == []
            assert not _bed_environ(), "processes started on the bed's hosts outlived stop"
            # the namespaces the tests made inside hosts never showed on the machine (the bed names
            # none there itself; other sessions' names may come and go meanwhile)
            leaked = {n for n in _machine_netns() - netns_before if n.startswith(BED_NETNS)}
            assert not leaked, leaked
