"""The run monitor: it runs the command with its output in a bounded log, exits as the command did,
relays the API through a Unix socket (read by ``runtime.apiclient``), and fails a run it cannot set
up with exit status 126 and the reason in the log."""

from __future__ import annotations

import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from paddlecloud.node import apirelay, monitor
from paddlecloud.node.logcap import MIN_LIMIT
from paddlecloud.runtime import apiclient


def _monitor(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-I", "-m", "paddlecloud.node.monitor", *args],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def test_the_command_runs_with_its_output_in_the_log_and_its_exit_code(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    r = _monitor("--log", str(log), "--", sys.executable, "-c", "import sys; print('hi'); sys.exit(3)")
    assert r.returncode == 3 and log.read_text() == "hi\n"


def test_a_command_killed_by_a_signal_ends_the_monitor_by_the_same_signal(tmp_path: Path) -> None:
    r = _monitor("--log", str(tmp_path / "w.log"), "--", "/bin/sh", "-c", "kill -9 $$")
    assert r.returncode == -signal.SIGKILL


def test_a_graceful_stop_to_the_group_reaches_the_command_not_the_monitor(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('term', flush=True), sys.exit(0)))\n"
        "print('up', flush=True)\ntime.sleep(30)"
    )
    monitor_argv = [sys.executable, "-I", "-m", "paddlecloud.node.monitor", "--log", str(log), "--"]
    proc = subprocess.Popen([*monitor_argv, sys.executable, "-c", code], start_new_session=True)
    for _ in range(300):
        if "up" in (log.read_text() if log.exists() else ""):
            break
        threading.Event().wait(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=20) == 0 and log.read_text() == "up\nterm\n"


def test_the_log_is_bounded(tmp_path: Path) -> None:
    log = tmp_path / "w.log"
    code = "import sys\nfor i in range(200000): sys.stdout.write(f'line {i}\\n')"
    r = _monitor("--log", str(log), "--max-log-bytes", str(MIN_LIMIT), "--", sys.executable, "-c", code)
    text = log.read_text()
    assert r.returncode == 0 and log.stat().st_size <= MIN_LIMIT
    assert text.startswith("line 0\n") and text.endswith("line 199999\n")
    assert "bytes" in text and "dropped" in text


def test_a_run_it_cannot_set_up_fails_with_126_and_says_why(tmp_path: Path) -> None:
    status = tmp_path / "exit.json"
    r = _monitor("--log", str(tmp_path / "w.log"), "--cgroup", str(tmp_path / "no-such-cgroup"),
                 "--status", str(status), "--", "/bin/true")  # fmt: skip
    assert r.returncode == monitor.CANNOT_START and "could not be started" in r.stderr
    assert json.loads(status.read_text())["exit_code"] == monitor.CANNOT_START


def test_the_ready_file_appears_once_the_program_listens(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ready = tmp_path / "w.ready"
    code = (
        "import socket, time\ntime.sleep(1)\n"
        f"s = socket.socket(); s.bind(('127.0.0.1', {port})); s.listen(); print('listening', flush=True)\n"
        "time.sleep(3)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-I", "-m", "paddlecloud.node.monitor", "--log", str(tmp_path / "w.log"),
         "--ready-port", str(port), "--ready-file", str(ready), "--", sys.executable, "-c", code],
    )  # fmt: skip
    time.sleep(0.5)
    assert not ready.exists()  # not listening yet
    deadline = time.monotonic() + 20
    while not ready.exists():
        assert time.monotonic() < deadline and proc.poll() is None, "no ready file while it listened"
        time.sleep(0.05)
    assert "listening" in (tmp_path / "w.log").read_text()
    assert proc.wait(timeout=20) == 0


def test_another_process_on_the_port_is_never_taken_for_the_program(tmp_path: Path) -> None:
    """Issue 25: a squatter holding a pserver's port made it look "run and listen" while the pserver
    had failed to bind. The ready file is written only for a listener the run's processes hold."""
    ready = tmp_path / "w.ready"
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        code = (
            "import socket, sys, time\ns = socket.socket()\n"
            f"try:\n    s.bind(('127.0.0.1', {port}))\nexcept OSError as e:\n    print(e, flush=True)\n"
            "time.sleep(1.5)\nsys.exit(3)"
        )
        r = subprocess.run(
            [sys.executable, "-I", "-m", "paddlecloud.node.monitor", "--log", str(tmp_path / "w.log"),
             "--ready-port", str(port), "--ready-file", str(ready), "--", sys.executable, "-c", code],
            timeout=30, check=False,
        )  # fmt: skip
    assert r.returncode == 3 and "Address already in use" in (tmp_path / "w.log").read_text()
    assert not ready.exists()


def test_bad_command_lines_are_refused_with_the_usage() -> None:
    bad = (
        ["--log"], ["--log", "x"], ["--bogus", "1", "--", "true"],
        ["--max-log-bytes", "z", "--log", "x", "--", "y"],
    )  # fmt: skip
    for argv in bad:
        with pytest.raises(ValueError):
            monitor.parse(argv)
    assert _monitor("--log", "x").returncode == 2


class _Api(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = json.dumps({"path": self.path, "auth": self.headers.get("Authorization")}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


def test_the_api_relay_carries_requests_from_its_socket_to_the_server(tmp_path: Path, api: int) -> None:
    sock = tmp_path / ("a-long-folder-name-" * 5) / "api.sock"  # longer than a socket address may be
    sock.parent.mkdir()
    client = (
        "import json, os, urllib.request\n"
        "from paddlecloud.runtime import apiclient\n"
        "req = urllib.request.Request('http://platform.invalid:1/api/v1/x',\n"
        "                             headers={'Authorization': 'Bearer t'})\n"
        "print(apiclient.opener().open(req, timeout=10).read().decode())\n"
    )
    env = {**os.environ, "PADDLECLOUD_API_SOCKET": str(sock)}
    listening = apirelay.listen(str(sock))  # the backend makes it and hands it over
    fd = listening.fileno()
    r = subprocess.run(
        [*monitor.command(), "--log", str(tmp_path / "w.log"), "--api-fd", str(fd),
         "--api-target", f"127.0.0.1:{api}", "--", sys.executable, "-c", client],
        env=env, capture_output=True, text=True, timeout=60, pass_fds=(fd,),
    )  # fmt: skip
    listening.close()
    assert r.returncode == 0, (tmp_path / "w.log").read_text()
    answer = json.loads((tmp_path / "w.log").read_text())
    assert answer == {"path": "/api/v1/x", "auth": "Bearer t"}


def test_without_a_socket_the_opener_goes_to_the_url(api: int) -> None:
    opener = apiclient.opener(environ={})
    with opener.open(urllib.request.Request(f"http://127.0.0.1:{api}/y"), timeout=10) as r:
        assert json.loads(r.read())["path"] == "/y"
