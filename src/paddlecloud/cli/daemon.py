"""``up --detach`` and ``down``: the platform as a background process of this machine.

    up --detach ──fork──▶ child: new session, stdin /dev/null, stdout + stderr appended to
       │                         <data>/server.log; runs ``up`` as in the foreground; removes its
       │                         pid file when it stops
       ├─ writes <data>/server.pid: {"pid", "started" (the process's start time), "url", "log"}
       ├─ polls GET /api/v1/health until it answers (at most HEALTHY_WITHIN_S; the child ending
       │  first, or no answer in time, is an error with the end of the log)
       └─ prints what ``up`` printed, the URL and how to stop it; exit 0
    down ──▶ the pid file's process (its start time must match: a pid the OS gave to another
             process since is a stale file) ── SIGTERM, at most ``timeout`` s, SIGKILL ──▶ exit 0

A pid file whose process is gone is stale: ``down`` removes it and says that nothing runs (exit 1);
``up`` replaces it. Jobs keep running when the server stops (their workers do not depend on it) and
the next ``up`` on the same data dir adopts them, as after Ctrl-C of a foreground ``up``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import click
import psutil

from paddlecloud.api.errors import PaddleCloudError
from paddlecloud.client import Client

__all__ = ["HEALTHY_WITHIN_S", "Running", "detach", "forget", "running", "stop"]

#: how long ``up --detach`` waits for the server to answer its health check
HEALTHY_WITHIN_S = 60.0
PID_FILE = "server.pid"
LOG_FILE = "server.log"


@dataclass(frozen=True)
class Running:
    """A detached server, as its pid file says."""

    pid: int
    started: float
    url: str
    log: str


def _pid_path(data_dir: Path) -> Path:
    return data_dir / PID_FILE


def running(data_dir: Path) -> tuple[Running | None, bool]:
    """The detached server of ``data_dir`` if its process is alive, and whether a pid file was
    found stale (and removed)."""
    path = _pid_path(data_dir)
    try:
        raw = json.loads(path.read_text())
        found = Running(int(raw["pid"]), float(raw["started"]), str(raw["url"]), str(raw["log"]))
    except FileNotFoundError:
        return None, False
    except (OSError, ValueError, KeyError, TypeError):
        path.unlink(missing_ok=True)  # unreadable: no server can be found through it
        return None, True
    if _alive(found.pid, found.started):
        return found, False
    path.unlink(missing_ok=True)
    return None, True


def _alive(pid: int, started: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return proc.create_time() == started and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def forget(data_dir: Path, pid: int) -> None:
    """Remove the pid file if it is still ``pid``'s (a server stopping)."""
    path = _pid_path(data_dir)
    try:
        if json.loads(path.read_text()).get("pid") == pid:
            path.unlink()
    except (OSError, ValueError, AttributeError):
        pass


def detach(data_dir: Path, url: str, ca: str | None, how_to_stop: str) -> None:
    """Fork. The child returns, detached, and goes on to serve; the parent waits until the server
    answers, prints where it is and how to stop it, and exits (1 with the log's end if it never
    answers)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    log = data_dir / LOG_FILE
    offset = log.stat().st_size if log.exists() else 0
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        _become_daemon(log)
        return
    started = psutil.Process(pid).create_time()
    pid_text = json.dumps({"pid": pid, "started": started, "url": url, "log": str(log)})
    _pid_path(data_dir).write_text(pid_text + "\n")
    problem = _wait_healthy(pid, url, ca)
    said = _read_from(log, offset)
    if problem:
        forget(data_dir, pid)
        if said:
            click.echo(said.rstrip("\n"), err=True)
        raise click.ClickException(f"{problem} (log: {log})")
    if said:
        click.echo(said.rstrip("\n"))
    click.echo(f"running in the background (pid {pid}, log {log}); stop it with: {how_to_stop}")
    sys.exit(0)


def _become_daemon(log: Path) -> None:
    os.setsid()  # no terminal: neither Ctrl-C in it nor closing it reaches the server
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(null)


def _wait_healthy(pid: int, url: str, ca: str | None) -> str:
    """ "" once the server answers; else what went wrong (it ended, or never answered in time)."""
    deadline = time.monotonic() + HEALTHY_WITHIN_S
    with Client(endpoint=url, token="", ca=ca, timeout=2.0) as client:
        while time.monotonic() < deadline:
            ended, status = os.waitpid(pid, os.WNOHANG)
            if ended:
                return f"the server did not start (exit status {os.waitstatus_to_exitcode(status)})"
            try:
                if client.health():
                    return ""
            except PaddleCloudError:
                pass
            time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return f"the server did not answer at {url} within {HEALTHY_WITHIN_S:g} s; stopped it"


def _ended(proc: psutil.Process, timeout: float) -> bool:
    """Whether ``proc`` ends within ``timeout`` s (a zombie has ended: only its parent's wait is
    missing, which is not ours to do)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _read_from(log: Path, offset: int) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            return f.read(64 * 1024).decode(errors="replace")
    except OSError:
        return ""


def stop(data_dir: Path, timeout: float) -> str:
    """SIGTERM the detached server of ``data_dir``, wait up to ``timeout`` s, then SIGKILL; what
    happened, for people. No server running (none started, or a stale pid file): ClickException."""
    found, stale = running(data_dir)
    if found is None:
        why = "its pid file was stale (removed)" if stale else f"no {_pid_path(data_dir)}"
        raise click.ClickException(
            f"no PaddleCloud server is running on {data_dir} ({why}); start one with: paddlecloud up --detach"
        )
    proc = psutil.Process(found.pid)
    how = "stopped"
    with contextlib.suppress(psutil.NoSuchProcess):
        proc.terminate()
        if not _ended(proc, timeout):
            proc.kill()
            _ended(proc, 10)
            how = f"killed (SIGKILL: it did not stop within {timeout:g} s of SIGTERM)"
    forget(data_dir, found.pid)
    said = (
        f"PaddleCloud at {found.url} {how} (pid {found.pid}); running jobs go on, and the next up adopts them"
    )
    return said + _left_mounted(data_dir)


def _left_mounted(data_dir: Path) -> str:
    """What the stopped server left mounted under ``data_dir``, in words (nothing: ""): the
    SampleSet mounts of jobs still running, each with its JuiceFS client, which the server keeps
    for them (``LocalSampleSets.close``) and the next ``up`` takes over."""
    from paddlecloud.storage.juicefs import mounts_under

    left = mounts_under(data_dir)
    if not left:
        return ""
    shown = ", ".join(str(m) for m in left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
    return (
        f"\n{len(left)} SampleSet mount(s) stay, each with its juicefs client, for the running jobs that "
        f"read them: {shown} (the next up takes them over)"
    )
