"""A job's own network on a host: a network namespace its workers there share, and nobody else.

    backend / node   ensure(JobNet)       make the namespace ``pcj-<id>`` if missing (``ip netns``),
                                          loopback up; with a VXLAN: the job's overlay link to its
                                          namespaces on other hosts (below)
    monitor          enter_argv(name)     ``nsenter --net=/run/netns/pcj-<id> --`` before the sandbox
    backend          listening(name, p)   does something of the job listen on TCP port ``p``?
                     remove(name)         the namespace goes when the job's last worker here ended

Inside, the workers of one job on one host talk over the namespace's own loopback (``127.0.0.1``:
the endpoints the local backend hands out); nothing of the host's network exists there: not its
loopback services (the database, the API's TCP port, other jobs' stores and pservers), not its
abstract Unix sockets, not its interfaces. The platform's API reaches the workers through a Unix
socket the monitor relays (``apirelay``).

A job spread over hosts (Slurm) gets one VXLAN segment of its own (``Vxlan``: VNI unique among live
jobs, chosen by the server): on each host its namespace holds the overlay link ``pcv<vni>``, made
in the host's namespace (the underlay: UDP 4789 between the hosts' own addresses, with a flood
entry per other host) and moved inside, where it carries the host's own address (/32) and the
default route. Workers keep addressing each other by their hosts' addresses, which inside every
namespace of the job lead over the job's own segment; the segment reaches no other job's
namespaces and no host. The workers cannot change any of it: the namespaces belong to the host's
root, and workers run in a user namespace without capabilities.

Making, entering and removing namespaces needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN); ``probe()``
says whether this host can. Standard library only; ``ip`` (iproute2) and ``nsenter`` (util-linux)
do the work.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from paddlecloud.node import ports

__all__ = [
    "NETNS_DIR",
    "JobNet",
    "NetnsError",
    "Vxlan",
    "collect",
    "ensure",
    "enter_argv",
    "exists",
    "hold",
    "in_use",
    "listening",
    "name_for",
    "probe",
    "remove",
    "remove_when_unused",
]

log = logging.getLogger(__name__)

#: where ``ip netns`` keeps named namespaces
NETNS_DIR = Path("/run/netns")
#: the VXLAN UDP port (IANA)
VXLAN_PORT = 4789
_LOCKS = Path("/run/paddlecloud/netns")
_TIMEOUT_S = 20.0


class NetnsError(RuntimeError):
    """The job's namespace cannot be made or used here; the message says why."""


@dataclass(frozen=True)
class Vxlan:
    """The job's overlay across hosts: its VNI, this host's own address (the underlay's source and
    the address the job's workers here have), and the other hosts' addresses (flood entries)."""

    vni: int
    local: str
    peers: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobNet:
    name: str
    vxlan: Vxlan | None = None


def name_for(job_id: str) -> str:
    """The namespace name of a job (``job_id``: letters and digits, unique among live jobs)."""
    return f"pcj-{job_id}"


def _run(*argv: str) -> str:
    import subprocess  # here: the monitor imports this module for enter_argv only

    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetnsError(f"{' '.join(argv)}: {exc}") from None
    if r.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: {(r.stderr or r.stdout).strip() or f'exit {r.returncode}'}")
    return r.stdout


def _path(name: str) -> Path:
    return NETNS_DIR / name


def exists(name: str) -> bool:
    return _path(name).exists()


@contextlib.contextmanager
def _locked(name: str) -> Iterator[None]:
    """Serialise making, entering and removing one namespace on this host (several workers of a job
    start and end at once)."""
    _LOCKS.mkdir(parents=True, exist_ok=True)
    fd = os.open(_LOCKS / f"{name}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def hold(name: str) -> int:
    """A hold on the namespace ``name`` (a descriptor with a shared lock on its users' file): taken
    before ``ensure`` by whoever is about to start a worker in it, and kept by the worker's monitor
    for the run's life (``--hold-fd``). ``remove(if_unused=True)`` never removes a held namespace,
    so none goes between being made and being entered, or while a run is in it."""
    _LOCKS.mkdir(parents=True, exist_ok=True)
    fd = os.open(_LOCKS / f"{name}.users", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _held(name: str) -> bool:
    """Whether someone holds ``name`` (``hold``); the caller holds ``_locked(name)``."""
    try:
        fd = os.open(_LOCKS / f"{name}.users", os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def in_use(name: str) -> bool:
    """Whether any process lives in the namespace ``name``."""
    try:
        ino = os.stat(_path(name)).st_ino
    except OSError:
        return False
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{entry.name}/ns/net").st_ino == ino:
                    return True
    return False


def _make(net: JobNet) -> None:
    _run("ip", "netns", "add", net.name)
    try:
        _run("ip", "-n", net.name, "link", "set", "lo", "up")
        if net.vxlan is not None:
            _overlay(net.name, net.vxlan)
    except NetnsError:
        with contextlib.suppress(NetnsError):
            _run("ip", "netns", "delete", net.name)
        raise


def _overlay(name: str, v: Vxlan) -> None:
    link = f"pcv{v.vni}"
    with contextlib.suppress(NetnsError):  # a leftover of a job whose namespace went first
        _run("ip", "link", "delete", link)
    # learning: a frame to a known MAC goes to its host alone; only what is flooded (ARP, unknown
    # MACs) goes to every host of the flood list
    _run("ip", "link", "add", link, "type", "vxlan", "id", str(v.vni), "local", v.local,
         "dstport", str(VXLAN_PORT))  # fmt: skip
    for peer in v.peers:
        if peer != v.local:
            _run("bridge", "fdb", "append", "00:00:00:00:00:00", "dev", link, "dst", peer)
    _run("ip", "link", "set", link, "netns", name)
    _run("ip", "-n", name, "addr", "add", f"{v.local}/32", "dev", link)
    _run("ip", "-n", name, "link", "set", link, "up")
    _run("ip", "-n", name, "route", "add", "default", "dev", link)


def ensure(net: JobNet) -> None:
    """Make the job's namespace here unless it exists (the caller holds it: ``hold``)."""
    with _locked(net.name):
        if not exists(net.name):
            _make(net)


def remove(name: str, *, if_unused: bool = False) -> bool:
    """Delete the namespace (``if_unused``: only when nobody holds it and no process is left in it).
    True if it went."""
    with _locked(name):
        if not exists(name) or (if_unused and (_held(name) or in_use(name))):
            return False
        _run("ip", "netns", "delete", name)
        return True


def remove_when_unused(name: str, wait_s: float = 30.0) -> None:
    """Remove the namespace once no process is left in it, waiting at most ``wait_s`` (a job's
    processes may still be ending); a failure is logged, never raised (run in a thread of its own)."""
    deadline = time.monotonic() + wait_s
    while exists(name) and time.monotonic() < deadline:
        try:
            if remove(name, if_unused=True):
                return
        except NetnsError as exc:
            log.warning("removing the network namespace %s failed: %s", name, exc)
            return
        time.sleep(0.5)


def collect(prefix: str, older_than: float = 60.0) -> int:
    """Remove the namespaces named ``prefix...`` that no process lives in and that were made more
    than ``older_than`` seconds ago (left by workers whose monitor was killed with their node);
    under each one's lock, so a worker entering it now keeps it. Returns how many went."""
    gone = 0
    cutoff = time.time() - older_than
    for entry in os.scandir(NETNS_DIR) if NETNS_DIR.is_dir() else ():
        if not entry.name.startswith(prefix):
            continue
        try:
            if entry.stat(follow_symlinks=False).st_mtime < cutoff and remove(entry.name, if_unused=True):
                gone += 1
        except (OSError, NetnsError):
            continue
    return gone


def enter_argv(name: str) -> list[str]:
    """The prefix that runs a command inside the namespace (``nsenter`` keeps the pid and the
    process group: signals sent to the run's group reach the command)."""
    return [shutil.which("nsenter") or "/usr/bin/nsenter", f"--net={_path(name)}", "--"]


def listening(name: str, port: int) -> bool:
    """Whether something in the namespace ``name`` listens on TCP ``port`` (any address)."""
    try:
        out = _run(*enter_argv(name), "cat", "/proc/net/tcp", "/proc/net/tcp6")
    except NetnsError:
        return False
    return port in ports.parse(out)


def probe(names: Sequence[str] = ("ip", "nsenter")) -> str | None:
    """None when job namespaces can be made here; else why not (for ``up`` to say)."""
    missing = [n for n in names if shutil.which(n) is None]
    if missing:
        return f"{' and '.join(missing)} not found (Debian: apt-get install iproute2 util-linux)"
    if os.geteuid() != 0:
        return "making network namespaces needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN)"
    name = f"pc-probe-{os.getpid()}"
    try:
        _run("ip", "netns", "add", name)
        _run("ip", "netns", "delete", name)
    except NetnsError as exc:
        return str(exc)
    return None
