"""A run that ends itself on a node cut off from the cluster (self-fencing), so it never runs twice.

A node whose link goes down keeps running its workers: Slurm cannot reach it, counts it down after
``SlurmdTimeout`` and ends its jobs ``NODE_FAIL``, and the platform restarts each worker on another
node. The old run still trains, writes and, once the link is back, talks to the job again until
slurmd learns its job is gone: the same worker twice. The run's monitor (``node.monitor``
``--fence-api HOST:PORT --fence-after S``) prevents that: from a thread, every ``period`` seconds,

    heard = the platform's API answers a TCP connection (accepted or refused: the host answered)
            or ``scontrol ping`` says the Slurm controller is up (asked only when the API is not heard:
            a proper Slurm call, which a bare connection to slurmctld would not be; ``scontrol`` by
            the absolute path the server found, never from the job's ``PATH``)

and when nothing was heard for ``after`` seconds (the backend gives half of ``SlurmdTimeout``: before
Slurm counts the node down, so the new run never overlaps the old) it says so in the run's log and
kills the run: its child's process tree and every process of the cgroups made for the run alone
(``--cgroup``; never the monitor's own cgroups, which hold others: Slurm's step, a shell's), and
the monitor writes the run's status (exit 137, reason ``CutOff``: ``get workers`` and the restart's
event say why) and exits the way the run did. A restart of the
server or of slurmctld alone is no partition: the other answers. Both away for ``after`` (the
server and controller on one host that is down) ends the runs too, as Slurm would once back.

Standard library only (it runs in every kept run's monitor); imported once the run has started.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable

__all__ = ["Fence", "FenceClock", "api_heard", "controller_heard", "kill_run", "run_pids", "status_body"]

#: how long one probe of the API may take
CONNECT_TIMEOUT_S = 2.0


def api_heard(target: tuple[str, int], timeout: float = CONNECT_TIMEOUT_S) -> bool:
    """Whether the API's host answers a connection: accepted, or refused (it answered)."""
    try:
        with socket.create_connection(target, timeout=timeout):
            return True
    except ConnectionRefusedError:
        return True
    except OSError:
        return False


def controller_heard(scontrol: str, timeout: float) -> bool:
    """``scontrol ping`` (``scontrol``: its absolute path, as the server found it, never one on the
    job's ``PATH``): whether this node reaches a Slurm controller that is up."""
    env = {"PATH": "/usr/bin:/bin", **{k: v for k, v in os.environ.items() if k.startswith("SLURM_CONF")}}
    try:
        proc = subprocess.run(
            [scontrol, "ping"], capture_output=True, timeout=timeout, check=False, env=env,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return False
    return proc.returncode == 0 and b" is UP" in proc.stdout


def _descendants(root: int, proc: str = "/proc") -> set[int]:
    """``root`` and every process below it (by their parents in ``/proc/<pid>/stat``)."""
    parents: dict[int, int] = {}
    for name in os.listdir(proc):
        if not name.isdigit():
            continue
        try:
            with open(f"{proc}/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...
        if len(fields) > 1 and fields[1].isdigit():
            parents[int(name)] = int(fields[1])
    found, frontier = {root}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found:
                found.add(pid)
                frontier.append(pid)
    return found


def run_pids(cgroup_dirs: list[str], child: int, proc: str = "/proc") -> set[int]:
    """Every process of the run: its child's tree and what is in ``cgroup_dirs`` (the cgroups the
    backend made for this run alone; never the cgroups the monitor is in, which may hold others)."""
    pids = _descendants(child, proc)
    for d in cgroup_dirs:
        try:
            with open(os.path.join(d, "cgroup.procs")) as f:
                pids |= {int(x) for x in f.read().split() if x.isdigit()}
        except OSError:
            continue
    return pids


class FenceClock:
    """When the node last heard the cluster; whether it is cut off (a pure rule: tests drive it)."""

    def __init__(self, after: float, now: float) -> None:
        self.after, self.last = after, now

    def look(self, now: float, heard: bool) -> bool:
        """Record one look; True once nothing was heard for ``after`` seconds."""
        if heard:
            self.last = now
        return now - self.last >= self.after


class Fence(threading.Thread):
    """The monitor's watch: :meth:`run` looks every ``period`` seconds and, cut off, ``say`` why
    (into the log) and ``end`` the run."""

    def __init__(
        self,
        watch: tuple[tuple[str, int], str],
        after: float,
        end: Callable[[str], None],
        say: Callable[[str], None],
    ) -> None:
        """``watch``: the API's (host, port) and the absolute path of ``scontrol``."""
        super().__init__(name="fence", daemon=True)
        (self.api, self.scontrol), self.after, self.end, self.say = watch, after, end, say
        self.period = min(max(after / 5, 1.0), 30.0)
        #: each probe's limit: a look never takes much of ``after``
        self.probe_s = min(CONNECT_TIMEOUT_S, after / 4)

    def heard(self) -> bool:
        """One look (an error in it counts as nothing heard, and the watch goes on)."""
        try:
            return api_heard(self.api, self.probe_s) or controller_heard(self.scontrol, self.probe_s * 2)
        except Exception:
            return False

    def run(self) -> None:
        host, port = self.api
        try:  # once: a name lookup with the link down could take longer than a look may
            self.api = (str(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][4][0]), port)
        except OSError:  # the name, tried at each look
            self.api = (host, port)
        clock = FenceClock(self.after, time.monotonic())
        while True:
            time.sleep(self.period)
            heard = self.heard()
            if clock.look(time.monotonic(), heard):
                break
        why = (
            f"this node heard neither the platform ({self.api[0]}:{self.api[1]}) nor the Slurm "
            f"controller for {self.after:g} s"
        )
        self.say(
            f"paddlecloud: {why}: ending this run (Slurm counts the node down and the platform "
            "restarts the worker elsewhere)"
        )
        self.end(why)


def status_body(message: str) -> str:
    """The run's status once its monitor ended it: killed (SIGKILL), reason ``CutOff``
    (``core.phases.WorkerReason``), and why."""
    return json.dumps(
        {"exit_code": 137, "signal": 9, "finished_at": time.time(), "reason": "CutOff", "message": message}
    )


def kill_run(cgroup_dirs: list[str], child: int) -> None:
    """SIGKILL to the run's child and every process of its cgroups but this one."""
    me = os.getpid()
    for pid in run_pids(cgroup_dirs, child):
        if pid != me:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                continue
