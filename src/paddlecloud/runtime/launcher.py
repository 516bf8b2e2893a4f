"""The per-worker launcher: the process the platform starts for every worker.

    platform ──spawn (own session)──▶ launcher ──/bin/sh -c ENTRY──▶ training program

Where endpoints are resolved at run time (``PADDLECLOUD_ENDPOINTS_DIR``, ``runtime.endpoints``) the
launcher first publishes this worker's host and waits, bounded, for the hosts the worker must know;
the program starts with every endpoint variable resolved (a timeout: exit status 1, the reason on
stderr). A server whose port another process holds on this node (``PADDLECLOUD_LISTEN_PORT``, or a
pserver's endpoint) is not started: exit status 1 with reason ``PortHeld`` in its status, so the
backend moves it to another port; one whose port is free there gets a ``port-free`` file beside
``--status`` once its program has started (the backend then knows a listener on that port is its
own, short of a process that took the port in that moment). The launcher runs the worker's entry
command in the worker's directory, waits for it and writes its exit status atomically to
``--status`` (``{"exit_code": int, "signal": int|null, "finished_at": float}``, and ``reason``,
``message`` where it knows why). It runs in its own session and process group, so it outlives a
restart of the platform server; the server re-adopts it from its pid file and later reads the
status file. SIGTERM and SIGINT are passed to the program, and the launcher keeps waiting so that
the exit status is still recorded.

Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from types import FrameType

from paddlecloud.runtime import contract as c
from paddlecloud.runtime import endpoints

__all__ = ["main", "write_json_atomic"]


def write_json_atomic(path: str, data: object) -> None:
    """Write JSON to ``path`` so that readers see the old file or the whole new one, never a part."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


#: the run's status ``reason`` when its port was held (``core.phases.WorkerReason.PORT_HELD``)
PORT_HELD = "PortHeld"
#: the file beside the status that says a server's port was free on its node when its program started
PORT_FREE = "port-free"


def _port_held(environ: dict[str, str]) -> str:
    """For a server (``LISTEN_PORT``, or a pserver's endpoint): why its port cannot be bound on this
    node ("" : it can). Checked on the node that binds it, since the server chose the port and
    could check it only on its own host; a listener there would otherwise be what the platform sees
    listening."""
    port = environ.get(c.CURRENT_ENDPOINT, "").rpartition(":")[2]
    if environ.get(c.LISTEN_PORT):
        port = environ[c.LISTEN_PORT]
    elif environ.get(c.ROLE) != "pserver":
        return ""
    if not port.isdigit():
        return ""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # its own last run's TIME_WAIT is no holder
        try:
            s.bind(("", int(port)))
        except OSError as exc:
            return (
                f"{environ.get(c.WORKER, 'this worker')}'s port {port} on {socket.gethostname()} cannot be "
                f"bound ({exc.strerror}): another process on the node holds it; the node must keep the "
                "platform's worker ports free (up --slurm-ports)"
            )
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="paddlecloud-launcher")
    parser.add_argument("--status", required=True, help="file to write the exit status to")
    parser.add_argument("--cwd", required=True)
    parser.add_argument("entry", help="shell command to run")
    args = parser.parse_args(argv)

    child: subprocess.Popen[bytes] | None = None
    early: list[int] = []

    def forward(signum: int, _frame: FrameType | None) -> None:
        if child is None:
            early.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    # Handlers first: the program then starts with the default actions even when the launcher
    # was started with SIGTERM / SIGINT ignored (a sandbox's outer process ignores them).
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    try:  # endpoints resolved at run time: publish this worker's host, learn the others'
        environ = endpoints.resolve(os.environ)
    except endpoints.EndpointsTimeout as exc:
        print(f"paddlecloud: {exc}", file=sys.stderr, flush=True)
        write_json_atomic(args.status, {"exit_code": 1, "signal": None, "finished_at": time.time()})
        return 1
    held = _port_held(environ)
    if held:  # a server's port taken on this node: say so now, not as the program's bind error
        print(f"paddlecloud: {held}", file=sys.stderr, flush=True)
        ended = {"exit_code": 1, "signal": None, "finished_at": time.time()}
        write_json_atomic(args.status, ended | {"reason": PORT_HELD, "message": held})
        return 1
    child = subprocess.Popen(["/bin/sh", "-c", args.entry], cwd=args.cwd, env=environ)
    if environ.get(c.LISTEN_PORT):  # checked free on this node before the program took it
        with contextlib.suppress(OSError):  # unsaid, the server waits on: never the program's end
            write_json_atomic(
                os.path.join(os.path.dirname(args.status) or ".", PORT_FREE), {"pid": child.pid}
            )
    for signum in early:
        forward(signum, None)
    rc = child.wait()
    code = rc if rc >= 0 else 128 - rc  # the shell convention: 128 + signal number
    status = {"exit_code": code, "signal": -rc if rc < 0 else None, "finished_at": time.time()}
    write_json_atomic(args.status, status)
    return code


if __name__ == "__main__":
    sys.exit(main())
