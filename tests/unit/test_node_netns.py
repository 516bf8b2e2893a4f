"""A job's network namespace: made once, shared by its workers, unreachable from the host and from
other jobs' namespaces, seen listening by the backend, and removed (root only: skipped elsewhere)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from paddlecloud.node import netns

SERVE = """\
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen()
print("up", flush=True)
time.sleep(60)
"""
CONNECT = """\
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=2)
    print("connected")
except OSError as e:
    print("refused", e.errno)
"""


@pytest.fixture
def nets() -> Iterator[list[str]]:
    why = netns.probe()
    if why is not None:
        pytest.skip(f"network namespaces cannot be made here: {why}")
    made: list[str] = []
    yield made
    for name in made:
        netns.remove(name)


def _in(name: str, code: str, *args: str) -> list[str]:
    return [*netns.enter_argv(name), sys.executable, "-c", code, *args]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_workers_of_one_job_meet_on_its_loopback_and_nobody_else_reaches_them(nets: list[str]) -> None:
    a, b = netns.name_for(f"t{os.getpid()}a"), netns.name_for(f"t{os.getpid()}b")
    nets += [a, b]
    netns.ensure(netns.JobNet(a))
    netns.ensure(netns.JobNet(a))  # idempotent: the job's second worker
    netns.ensure(netns.JobNet(b))
    port = _free_port()
    server = subprocess.Popen(_in(a, SERVE, str(port)), stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "up"
        assert netns.listening(a, port) and not netns.listening(b, port) and netns.in_use(a)
        same = subprocess.run(_in(a, CONNECT, str(port)), capture_output=True, text=True, timeout=30)
        other = subprocess.run(_in(b, CONNECT, str(port)), capture_output=True, text=True, timeout=30)
        assert same.stdout.strip() == "connected"  # a worker of the same job
        assert other.stdout.startswith("refused")  # another job
        with pytest.raises(OSError):  # the host
            socket.create_connection(("127.0.0.1", port), timeout=2)
    finally:
        server.kill()
        server.wait()
    for _ in range(50):
        if not netns.in_use(a):
            break
        time.sleep(0.05)
    assert netns.remove(a, if_unused=True) and not netns.exists(a)


def test_the_hosts_loopback_services_do_not_exist_inside(nets: list[str]) -> None:
    name = netns.name_for(f"t{os.getpid()}c")
    nets.append(name)
    netns.ensure(netns.JobNet(name))
    with socket.socket() as host_service:  # a service on the host's loopback (the database, the API)
        host_service.bind(("127.0.0.1", 0))
        host_service.listen()
        port = host_service.getsockname()[1]
        r = subprocess.run(_in(name, CONNECT, str(port)), capture_output=True, text=True, timeout=30)
    assert r.stdout.startswith("refused")
    links = subprocess.run([*netns.enter_argv(name), "ip", "-o", "link"], capture_output=True, text=True)
    assert [line.split(":")[1].strip() for line in links.stdout.splitlines()] == ["lo"]


def test_a_held_namespace_is_never_removed_under_its_holder(nets: list[str]) -> None:
    """Found in review: nothing held a namespace between its making and a worker entering it, so
    another worker's end (or a collection) could remove it then; a hold (``netns.hold``, kept by
    each run's monitor) now keeps it."""
    name = netns.name_for(f"t{os.getpid()}h")
    nets.append(name)
    hold = netns.hold(name)
    try:
        netns.ensure(netns.JobNet(name))
        assert not netns.remove(name, if_unused=True) and netns.exists(name)  # no process, but held
        assert netns.collect(name, older_than=0) == 0 and netns.exists(name)
        second = netns.hold(name)  # another worker of the job: both hold it
        os.close(second)
        assert netns.exists(name)
    finally:
        os.close(hold)
    assert netns.remove(name, if_unused=True) and not netns.exists(name)
